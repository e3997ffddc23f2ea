/* Fused small-batch matmul on packed low-bit weights (slimkit PackedLinear, CPU).
 *
 * y[i, n] = bias[n] + sum_g s[n, g] * (sum_{k in g} x[i, k] * q[n, k] - z[n, g] * sum_{k in g} x[i, k])
 *
 * The packed codes are read once, unpacked in registers and multiplied against the input; no dequantised
 * weight is ever written to memory. The packed layout is slimkit's (lowbit/packing.py): 8 bits one value per
 * byte, 4 bits two per byte (low nibble first), 2 bits four per byte (lowest bits first), 3 bits eight values
 * per 24-bit word whose three bytes are stored planar (all low bytes of a row, then all middle, then all high).
 * The input is first split into "planes" (plane v holds x[u * V + v] for unit u, V values per unit) so the
 * inner loops over units are plain vectorisable loops; accumulation is per lane, with one horizontal sum per
 * row. Scales and zeros are IEEE float16 bit patterns. Output rows are split across OpenMP threads (the same
 * libgomp runtime torch uses). Built with -mno-avx512f, the same source gives the AVX2 + FMA kernel.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__AVX2__) || defined(__F16C__)
#include <immintrin.h>
#endif

static inline float half_to_float(uint16_t h) {
#if defined(__F16C__)
    return _cvtsh_ss(h);
#else
    uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
    uint32_t bits = ((uint32_t)(h & 0x8000u) << 16) | (exp == 0x1Fu ? 0x7F800000u | (man << 13)
                                                       : exp ? ((exp + 112u) << 23) | (man << 13) : 0u);
    float f;
    memcpy(&f, &bits, sizeof f);
    return exp || !man ? f : (h & 0x8000u ? -1.0f : 1.0f) * (float)man * (1.0f / 16777216.0f); /* subnormal */
#endif
}

/* VL-lane vectors (GCC/Clang vector extensions): 16 lanes in AVX-512 registers, else 8 (AVX2 or plain C).
 * Unaligned loads go through memcpy, which compiles to one vector load. The byte -> int -> float conversions use
 * explicit instructions where the CPU has them (the generic conversion compiles to per-byte scalar code). */
#if defined(__AVX512F__) && !defined(SLIMKIT_VL8)
#define VL 16
#else
#define VL 8
#endif
typedef float vf __attribute__((vector_size(VL * 4)));
typedef uint32_t vu __attribute__((vector_size(VL * 4)));

static inline vf loadf(const float *p) { vf v; memcpy(&v, p, sizeof v); return v; }
#if VL == 16
static inline vu loadb(const uint8_t *p) { return (vu)_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)); }
static inline vf tof(vu v) { return (vf)_mm512_cvtepi32_ps((__m512i)v); }
#elif defined(__AVX2__)
static inline vu loadb(const uint8_t *p) { return (vu)_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)); }
static inline vf tof(vu v) { return (vf)_mm256_cvtepi32_ps((__m256i)v); }
#else
static inline vu loadb(const uint8_t *p) { vu r; for (int j = 0; j < VL; j++) r[j] = p[j]; return r; }
static inline vf tof(vu v) { vf r; for (int j = 0; j < VL; j++) r[j] = (float)v[j]; return r; }
#endif

/* codes of value v for VL consecutive units starting at unit u, as floats */
#define CODES_4(row, units, u) vu b_ = loadb((row) + (u)); vf c_[2] = {tof(b_ & 15u), tof(b_ >> 4)};
#define CODES_2(row, units, u) vu b_ = loadb((row) + (u));                                                     \
    vf c_[4] = {tof(b_ & 3u), tof((b_ >> 2) & 3u), tof((b_ >> 4) & 3u), tof(b_ >> 6)};
#define CODES_8(row, units, u) vf c_[1] = {tof(loadb((row) + (u)))};
#define CODES_3(row, units, u)                                                                                 \
    vu b_ = loadb((row) + (u)) | (loadb((row) + (units) + (u)) << 8) | (loadb((row) + 2 * (units) + (u)) << 16); \
    vf c_[8] = {tof(b_ & 7u), tof((b_ >> 3) & 7u), tof((b_ >> 6) & 7u), tof((b_ >> 9) & 7u),                   \
                tof((b_ >> 12) & 7u), tof((b_ >> 15) & 7u), tof((b_ >> 18) & 7u), tof(b_ >> 21)};

/* src/at/stride address the codes of the VL units at u of a row: the row itself, or for a group's last
 * u1 - u < VL units a zero-padded copy (zero codes add nothing), so every step is a full vector step */
#define TAIL(NB, row_, units_, u_, u1_)                                                                        \
    uint8_t tb[3 * VL];                                                                                        \
    const uint8_t *src = (row_);                                                                               \
    int64_t at = (u_), stride = (units_);                                                                      \
    if ((u_) + VL > (u1_)) {                                                                                   \
        memset(tb, 0, sizeof tb);                                                                              \
        for (int64_t p_ = 0; p_ < (NB); p_++) memcpy(tb + p_ * VL, src + p_ * (units_) + (u_), (size_t)((u1_) - (u_))); \
        src = tb; at = 0; stride = VL;                                                                         \
    }                                                                                                          \
    (void)stride;

/* One output row for m <= 8 inputs. Per group: VL-lane accumulators per input, folded into the row totals with
 * the group scale (one FMA per lane); the zero point enters once per group through the input's group sum; one
 * horizontal sum per row at the end. The input planes are ps >= units + VL floats apart and zero-padded, so
 * their loads stay inside. */
#define ROW(BITS, PER, NB, NAME)                                                                               \
    static void NAME(const uint8_t *row, int64_t units, int64_t ps, int64_t groups, int64_t gu, const float *xp, \
                     const float *xsum, const uint16_t *sc, const uint16_t *zc, int64_t m, float *out) {        \
        vf tot[8];                                                                                             \
        float zterm[8];                                                                                        \
        for (int64_t i = 0; i < m; i++) { tot[i] = (vf){0}; zterm[i] = 0.0f; }                                \
        for (int64_t g = 0; g < groups; g++) {                                                                 \
            float s = half_to_float(sc[g]), z = half_to_float(zc[g]);                                          \
            int64_t u0 = g * gu, u1 = u0 + gu < units ? u0 + gu : units;                                       \
            vf acc[8];                                                                                         \
            for (int64_t i = 0; i < m; i++) acc[i] = (vf){0};                                                  \
            for (int64_t u = u0; u < u1; u += VL) {                                                            \
                TAIL(NB, row, units, u, u1)                                                                    \
                CODES_##BITS(src, stride, at)                                                                  \
                for (int64_t i = 0; i < m; i++) {                                                              \
                    const float *xi = xp + i * PER * ps + u;                                                   \
                    _Pragma("GCC unroll 8")                                                                    \
                    for (int v = 0; v < PER; v++) acc[i] += loadf(xi + v * ps) * c_[v];                       \
                }                                                                                              \
            }                                                                                                  \
            for (int64_t i = 0; i < m; i++) {                                                                  \
                tot[i] += s * acc[i];                                                                          \
                zterm[i] += s * z * xsum[i * groups + g];                                                      \
            }                                                                                                  \
        }                                                                                                      \
        for (int64_t i = 0; i < m; i++) {                                                                      \
            float r = 0.0f;                                                                                    \
            for (int j = 0; j < VL; j++) r += tot[i][j];                                                       \
            out[i] = r - zterm[i];                                                                             \
        }                                                                                                      \
    }

typedef void (*row_fn)(const uint8_t *, int64_t, int64_t, int64_t, int64_t, const float *, const float *,
                       const uint16_t *, const uint16_t *, int64_t, float *);
ROW(2, 4, 1, r2_m)
ROW(3, 8, 3, r3_m)
ROW(4, 2, 1, r4_m)
ROW(8, 1, 1, r8_m)

/* Decode (one input): R output rows at once, the main loop unrolled U vector steps, so R * U * PER accumulators
 * are independent (8 for every width: enough FMA chains in flight to hide the FMA latency on two FMA pipes) and
 * each input vector is loaded once for the R rows. Per group: the accumulators are summed, scaled once (one FMA
 * per lane), the zero point enters through the input's group sum. The group's units that are not a whole U-step
 * go one vector at a time (TAIL). Rows are `rb` bytes apart. Same arithmetic per lane as ROW up to the order of
 * the additions. */
#define DECODE(BITS, PER, NB, NAME, R, U)                                                                      \
    static void NAME(const uint8_t *row, int64_t rb, int64_t units, int64_t ps, int64_t groups, int64_t gu,     \
                     const float *xp, const float *xsum, const uint16_t *sc, const uint16_t *zc, float *out) {  \
        vf tot[R];                                                                                             \
        float zterm[R];                                                                                        \
        for (int r = 0; r < R; r++) { tot[r] = (vf){0}; zterm[r] = 0.0f; }                                     \
        for (int64_t g = 0; g < groups; g++) {                                                                 \
            int64_t u0 = g * gu, u1 = u0 + gu < units ? u0 + gu : units, u = u0;                               \
            vf acc[R][U * PER];                                                                                \
            for (int r = 0; r < R; r++)                                                                        \
                for (int j = 0; j < U * PER; j++) acc[r][j] = (vf){0};                                         \
            for (; u + U * VL <= u1; u += U * VL) {                                                            \
                _Pragma("GCC unroll 4")                                                                        \
                for (int uu = 0; uu < U; uu++) {                                                               \
                    vf xv[PER];                                                                                \
                    _Pragma("GCC unroll 8")                                                                    \
                    for (int v = 0; v < PER; v++) xv[v] = loadf(xp + v * ps + u + uu * VL);                    \
                    _Pragma("GCC unroll 2")                                                                    \
                    for (int r = 0; r < R; r++) {                                                              \
                        CODES_##BITS(row + r * rb, units, u + uu * VL)                                         \
                        _Pragma("GCC unroll 8")                                                                \
                        for (int v = 0; v < PER; v++) acc[r][uu * PER + v] += xv[v] * c_[v];                   \
                    }                                                                                          \
                }                                                                                              \
            }                                                                                                  \
            for (; u < u1; u += VL) {                                                                          \
                for (int r = 0; r < R; r++) {                                                                  \
                    TAIL(NB, row + r * rb, units, u, u1)                                                       \
                    CODES_##BITS(src, stride, at)                                                              \
                    for (int v = 0; v < PER; v++) acc[r][v] += loadf(xp + v * ps + u) * c_[v];                 \
                }                                                                                              \
            }                                                                                                  \
            for (int r = 0; r < R; r++) {                                                                      \
                vf a = acc[r][0];                                                                              \
                for (int j = 1; j < U * PER; j++) a += acc[r][j];                                              \
                float s = half_to_float(sc[r * groups + g]), z = half_to_float(zc[r * groups + g]);            \
                tot[r] += s * a;                                                                               \
                zterm[r] += s * z * xsum[g];                                                                   \
            }                                                                                                  \
        }                                                                                                      \
        for (int r = 0; r < R; r++) {                                                                          \
            float t = 0.0f;                                                                                    \
            for (int j = 0; j < VL; j++) t += tot[r][j];                                                       \
            out[r] = t - zterm[r];                                                                             \
        }                                                                                                      \
    }

typedef void (*dec_fn)(const uint8_t *, int64_t, int64_t, int64_t, int64_t, int64_t, const float *, const float *,
                       const uint16_t *, const uint16_t *, float *);
DECODE(2, 4, 1, d2_2, 2, 1)
DECODE(2, 4, 1, d2_1, 1, 2)
DECODE(3, 8, 3, d3_1, 1, 1)
DECODE(4, 2, 1, d4_2, 2, 2)
DECODE(4, 2, 1, d4_1, 1, 4)
DECODE(8, 1, 1, d8_2, 2, 4)
DECODE(8, 1, 1, d8_1, 1, 8)

/* values per packing unit and bytes per unit of a bit width; nonzero for an unsupported width */
static int unit_shape(int bits, int64_t *per, int64_t *nbytes) {
    switch (bits) {
        case 2: *per = 4; *nbytes = 1; return 0;
        case 3: *per = 8; *nbytes = 3; return 0;
        case 4: *per = 2; *nbytes = 1; return 0;
        case 8: *per = 1; *nbytes = 1; return 0;
        default: return 1;
    }
}

/* Vector width the kernel was compiled for: 512 (AVX-512), 256 (AVX2) or 0 (plain C, slower than torch). */
int slimkit_lowbit_simd(void) {
#if VL == 16
    return 512;
#elif defined(__AVX2__)
    return 256;
#else
    return 0;
#endif
}

#ifndef PREFETCH
#define PREFETCH 8
#endif

/* Input planes + group sums, kept per thread between calls (no allocation per call once large enough). */
static __thread float *scratch;
static __thread int64_t scratch_len;

/* x [m, k] (m <= 8), y [m, n]. Returns 0 on success, 1 on a bad argument, 2 when out of memory. */
int slimkit_lowbit_matmul(const float *x, int64_t m, int64_t k, const uint8_t *qweight, int64_t n,
                          int64_t row_bytes, const uint16_t *scales, const uint16_t *zeros, int64_t groups,
                          int64_t group_size, int bits, const float *bias, float *y, int threads) {
    int64_t per, nbytes;
    if (unit_shape(bits, &per, &nbytes)) return 1;
    int64_t units = row_bytes / nbytes;
    if (m < 1 || m > 8 || k < 1 || n < 1 || group_size % per || units * per < k || groups * group_size < k) return 1;
    int64_t gu = group_size / per; /* units per group */
    int64_t ps = units + VL;         /* input plane stride, zero-padded so the last vector load stays inside */
    int64_t need = m * per * ps + m * groups;
    if (need > scratch_len) {
        float *grown = (float *)realloc(scratch, (size_t)need * sizeof(float));
        if (!grown) return 2;
        scratch = grown;
        scratch_len = need;
    }
    float *xp = scratch, *xsum = scratch + m * per * ps;
    for (int64_t i = 0; i < m; i++) {
        const float *xi = x + i * k;
        float *pi = xp + i * per * ps;
        for (int64_t v = 0; v < per; v++) {
            float *plane = pi + v * ps;
            for (int64_t u = 0; u < units; u++) plane[u] = u * per + v < k ? xi[u * per + v] : 0.0f;
            memset(plane + units, 0, VL * sizeof(float));
        }
        for (int64_t g = 0; g < groups; g++) {
            float t = 0.0f;
            for (int64_t c = g * group_size; c < (g + 1) * group_size && c < k; c++) t += xi[c];
            xsum[i * groups + g] = t;
        }
    }
    if (m == 1) {
        dec_fn two = bits == 2 ? d2_2 : bits == 4 ? d4_2 : bits == 8 ? d8_2 : 0;
        dec_fn one = bits == 2 ? d2_1 : bits == 4 ? d4_1 : bits == 8 ? d8_1 : d3_1;
        int64_t step = two ? 2 : 1, blocks = (n + step - 1) / step;
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int64_t b = 0; b < blocks; b++) {
            int64_t o = b * step;
            float out[2];
            /* the weights stream from memory once per token: fetch the rows PREFETCH blocks ahead meanwhile */
            if (o + (PREFETCH + 1) * step <= n) {
                const char *ahead = (const char *)(qweight + (o + PREFETCH * step) * row_bytes);
                for (int64_t off = 0; off < step * row_bytes; off += 64) __builtin_prefetch(ahead + off, 0, 0);
            }
            if (step == 2 && o + 1 < n) {
                two(qweight + o * row_bytes, row_bytes, units, ps, groups, gu, xp, xsum, scales + o * groups,
                    zeros + o * groups, out);
                y[o] = out[0] + (bias ? bias[o] : 0.0f);
                y[o + 1] = out[1] + (bias ? bias[o + 1] : 0.0f);
            } else {
                one(qweight + o * row_bytes, row_bytes, units, ps, groups, gu, xp, xsum, scales + o * groups,
                    zeros + o * groups, out);
                y[o] = out[0] + (bias ? bias[o] : 0.0f);
            }
        }
        return 0;
    }
    row_fn fn = bits == 2 ? r2_m : bits == 3 ? r3_m : bits == 4 ? r4_m : r8_m;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t o = 0; o < n; o++) {
        float out[8];
        fn(qweight + o * row_bytes, units, ps, groups, gu, xp, xsum, scales + o * groups, zeros + o * groups, m, out);
        for (int64_t i = 0; i < m; i++) y[i * n + o] = out[i] + (bias ? bias[o] : 0.0f);
    }
    return 0;
}

/* one vector step of the planar dequantisation: codes of VL units, (c - z) * s, stored per plane (only the
 * `valid` lanes at a group's end, so the next plane's start is never overwritten) */
#define DEQ_STEP(BITS, PER)                                                                                     \
    {                                                                                                          \
        CODES_##BITS(src, stride, at)                                                                          \
        for (int v = 0; v < PER; v++) {                                                                        \
            vf d = (c_[v] - z) * s;                                                                            \
            memcpy(dst + v * units + u, &d, (size_t)valid * sizeof(float));                                   \
        }                                                                                                      \
    }

/* Dequantise the whole weight for long inputs (prefill), in PLANAR column order: out[o, v * units + u] is the
 * weight of column u * per + v, so every store is a full vector. The caller permutes the input's columns the
 * same way (x[:, u * per + v] -> column v * units + u, zero-padded to per * units) and runs one dense matmul.
 * out is [n, per * units]. Returns 0 on success, 1 on a bad argument. */
int slimkit_lowbit_dequantize_planar(const uint8_t *qweight, int64_t n, int64_t row_bytes, const uint16_t *scales,
                                     const uint16_t *zeros, int64_t groups, int64_t group_size, int bits,
                                     float *out, int threads) {
    int64_t per, nbytes;
    if (unit_shape(bits, &per, &nbytes)) return 1;
    int64_t units = row_bytes / nbytes;
    if (n < 1 || units < 1 || group_size % per || groups * (group_size / per) < units) return 1;
    int64_t gu = group_size / per;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t o = 0; o < n; o++) {
        const uint8_t *row = qweight + o * row_bytes;
        float *dst = out + o * per * units;
        for (int64_t g = 0; g < groups; g++) {
            vf s = (vf){0} + half_to_float(scales[o * groups + g]), z = (vf){0} + half_to_float(zeros[o * groups + g]);
            int64_t u0 = g * gu, u1 = u0 + gu < units ? u0 + gu : units;
            for (int64_t u = u0; u < u1; u += VL) {
                int64_t valid = u1 - u < VL ? u1 - u : VL;
                TAIL(nbytes, row, units, u, u1)
                if (bits == 4) DEQ_STEP(4, 2)
                else if (bits == 3) DEQ_STEP(3, 8)
                else if (bits == 2) DEQ_STEP(2, 4)
                else DEQ_STEP(8, 1)
            }
        }
    }
    return 0;
}
