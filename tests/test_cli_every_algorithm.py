"""Every registered algorithm runs from the shell on a compatible zoo model, the zoo model supplying its inputs,
tokenizer and data (issue: "the command line runs every algorithm")."""

from __future__ import annotations

import pytest

from slimkit.cli import main
from slimkit.core import registry

LLM_CALIBRATION = ["--set", "{a}_n_calibration_samples=4", "--set", "{a}_seq_len=64", "--set", "{a}_group_size=32"]

#: algorithm -> (zoo model, extra arguments); "{a}" is the algorithm's name. A new algorithm must be added here.
RECIPES: dict[str, tuple[str, list[str]]] = {
    "activation_apoz_rank": ("digits_cnn", []),
    "activation_mean_rank": ("digits_cnn", []),
    "agp": ("digits_cnn", ["--set", "agp_epochs=1"]),
    "awq": ("tiny_llama", LLM_CALIBRATION),
    "bnn": ("digits_cnn", ["--set", "bnn_epochs=1"]),
    "c_generate": ("tiny_llama", ["--set", "c_generate_n_threads=1"]),
    "c_whisper": ("tests.test_cli_generate:tiny_whisper_with_tokenizer", ["--set", "c_whisper_n_threads=1"]),
    "c_translate": ("tests.algorithms.models:tiny_bart_with_tokenizer", ["--set", "c_translate_n_threads=1"]),
    "channel_energy": ("tiny_llama", ["--set", "channel_energy_batches=2", "--set", "channel_energy_batch_size=4"]),
    "dorefa": ("digits_cnn", ["--set", "dorefa_epochs=1"]),
    "dynamic_batch": ("tiny_bert", []),
    "embedding_cache": ("tiny_bert", []),
    "finetune": ("digits_cnn", ["--set", "finetune_steps=5"]),
    "fpgm": ("digits_cnn", []),
    "gptq": ("tiny_llama", LLM_CALIBRATION),
    "half": ("mlp", []),
    "hqq": ("tiny_llama", ["--set", "hqq_group_size=32"]),
    "int8_dynamic": ("tiny_bert", []),
    "int8_smooth": ("tiny_llama", []),
    "int8_static": ("digits_cnn", []),
    "kvpress": ("tiny_llama", ["--set", "kvpress_press_type=KnormPress"]),
    "kd_recover": ("digits_cnn", ["--set", "kd_recover_steps=5"]),
    "l1_filter": ("resnet_tiny", []),
    "l2_filter": ("digits_cnn", []),
    "layer_drop": ("tiny_llama", ["--set", "layer_drop_steps=2", "--set", "layer_drop_batch_size=4"]),
    "level": ("tiny_vit", []),
    "text_to_text_perp": ("tiny_llama", ["--set", "{a}_steps=2", "--set", "{a}_training_batch_size=2"]),
    "text_to_text_inplace_perp": ("tiny_llama", ["--set", "{a}_steps=2", "--set", "{a}_training_batch_size=2"]),
    "llama_cpp": ("tiny_llama", ["--set", "llama_cpp_n_threads=1"]),
    "lsq": ("digits_cnn", ["--set", "lsq_epochs=1"]),
    "naive": ("digits_cnn", []),
    "onnxruntime": ("mlp", []),
    "quanto": ("tiny_llama", ["--set", "quanto_weight_bits=qint8"]),
    "reduce_noe": ("tests.algorithms.models:tiny_mixtral_with_inputs", ["--set", "reduce_noe_num_experts_per_token=1"]),
    "token_merging": ("tiny_vit", ["--set", "token_merging_r=4"]),
    "torchao": ("tiny_llama", ["--set", "torchao_quant_type=int8wo"]),
    "prefix_cache": ("tiny_llama", []),
    "qat": ("digits_cnn", ["--set", "qat_epochs=1"]),
    "rtn": ("tiny_gpt2", []),
    "slim": ("digits_cnn", []),
    "sparsegpt": ("tiny_llama", LLM_CALIBRATION),
    "step_cache": ("tests.algorithms.models:tiny_unet_with_inputs", []),
    "taylor_fo_weight": ("digits_cnn", []),
    "torch_compile": ("mlp", []),
    "wanda": ("tiny_llama", LLM_CALIBRATION[:4]),
    "width_distill": ("digits_cnn", ["--set", "width_distill_steps=5"]),
    "spos_search": ("digits_cnn", ["--set", "spos_search_supernet_steps=20", "--set", "spos_search_num_candidates=4",
                                   "--set", "spos_search_top_k=2", "--set", "spos_search_max_epochs=1",
                                   "--set", "spos_search_steps=5"]),
    "autoslim": ("digits_cnn", ["--set", "autoslim_supernet_steps=5", "--set", "autoslim_score_batches=1"]),
    "bignas": ("digits_cnn", ["--set", "bignas_supernet_steps=5", "--set", "bignas_num_candidates=4",
                              "--set", "bignas_top_k=2", "--set", "bignas_max_epochs=1"]),
    "darts": ("digits_cnn", ["--set", "darts_steps=5"]),
    "dsnas": ("digits_cnn", ["--set", "dsnas_steps=5"]),
    "admm": ("digits_cnn", ["--set", "admm_num_iterations=1"]),
    "amc": ("digits_cnn", ["--set", "amc_episodes=3", "--set", "amc_warmup=1", "--set", "amc_eval_finetune_steps=0"]),
    "auto_compress": ("digits_cnn", ["--set", "auto_compress_num_iterations=1",
                                      "--set", "auto_compress_cool_down_rate=0.3",
                                      "--set", "auto_compress_admm_num_iterations=1",
                                      "--set", "auto_compress_eval_finetune_steps=0"]),
    "lottery_ticket": ("digits_cnn", ["--set", "lottery_ticket_prune_iterations=1"]),
    "group_fisher": ("digits_cnn", ["--set", "group_fisher_interval=1", "--set", "group_fisher_target_macs_ratio=0.95",
                                     "--set", "group_fisher_batch_size=32"]),
    "ite_prune": ("digits_cnn", ["--set", "ite_prune_steps=4", "--set", "ite_prune_step_freq=2"]),
    "dcff": ("digits_cnn", ["--set", "dcff_steps=3"]),
    "dmcp": ("digits_cnn", ["--set", "dmcp_steps=3"]),
    "slimmable_network": ("digits_cnn", ["--set", "slimmable_network_steps=3"]),
    "movement": ("digits_cnn", ["--set", "movement_epochs=1"]),
    "net_adapt": ("digits_cnn", ["--set", "net_adapt_sparsity_per_iteration=0.25", "--set",
                                  "net_adapt_finetune_steps=1"]),
    "sensitivity": ("digits_cnn", ["--set", "sensitivity_sparsity_per_iter=0.5", "--set",
                                    "sensitivity_finetune_steps=0"]),
    "simulated_annealing": ("digits_cnn", ["--set", "simulated_annealing_cool_down_rate=0.3", "--set",
                                            "simulated_annealing_eval_finetune_steps=0"]),
}


def test_every_registered_algorithm_has_a_shell_recipe():
    assert set(RECIPES) == set(registry.names()), \
        "add the new algorithm to RECIPES with a compatible zoo model"


#: algorithm -> pytest marks of its shell case (llama_cpp needs the llamacpp extra: `make test-llamacpp`)
MARKS = {"llama_cpp": [pytest.mark.llamacpp],
         **{a: [pytest.mark.slow] for a in ("group_fisher", "ite_prune", "dcff", "dmcp", "slimmable_network",
                                                    "c_whisper", "autoslim", "bignas", "darts", "dsnas",
                                                    "text_to_text_perp", "text_to_text_inplace_perp")}}


@pytest.mark.parametrize("algorithm", [pytest.param(a, marks=MARKS.get(a, [])) for a in sorted(RECIPES)])
def test_algorithm_runs_from_the_shell(algorithm, capsys):
    model, extra = RECIPES[algorithm]
    args = ["smash", "--model", model, "--algorithm", algorithm, "--no-save", "--repeats", "1", "--warmup", "0"]
    code = main(args + [a.format(a=algorithm) for a in extra])
    captured = capsys.readouterr()
    assert code == 0, f"slimkit {' '.join(args)} failed:\n{captured.err[-2000:]}"
    assert "fidelity" in captured.out and "cfg." not in captured.err


def test_combinations_run_in_stage_order(capsys):
    code = main(["smash", "--model", "digits_cnn", "--algorithm", "int8_dynamic", "--algorithm", "l1_filter",
                 "--no-save", "--repeats", "1", "--warmup", "0"])
    out = capsys.readouterr().out
    assert code == 0 and "recipe ['l1_filter', 'int8_dynamic']" in out
