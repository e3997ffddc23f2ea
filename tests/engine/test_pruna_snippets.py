"""Pruna's tutorial and user-manual snippets for algorithms slimkit has, with ``pruna`` replaced by ``slimkit``.

The snippets are quoted from Pruna (https://github.com/PrunaAI/pruna, Apache-2.0, commit 2cd117b2):
``docs/tutorials/llms.ipynb``, ``reasoning_llm.ipynb``, ``llm_quantization_compilation_acceleration.ipynb``,
``diffusion_quantization_acceleration.ipynb``, ``sd_deepcache.ipynb``, ``cv_cpu.ipynb`` and
``docs/user_manual/save_load.rst`` / ``configure.rst``. Only the import changes (``from pruna`` -> ``from slimkit``),
except where a snippet downloads a model from the Hugging Face hub: these tests are offline, so the line that
loads ``pipe.model`` / ``base_model`` is replaced by one of slimkit's offline zoo models of the same kind (marked
``# offline`` in each snippet).
"""

from __future__ import annotations

import pytest
import torch

from slimkit import zoo


def _run(code: str, **names) -> dict:
    scope = dict(names)
    exec(compile(code, "<pruna snippet>", "exec"), scope)  # noqa: S102 - the snippet under test
    return scope


LLM_TUTORIAL = '''
from slimkit import SmashConfig

smash_config = SmashConfig(
    {
        "hqq": {"weight_bits": 4, "compute_dtype": "torch.bfloat16"},
        "torch_compile": {"fullgraph": True, "dynamic": True, "mode": "max-autotune"}
    },
    device=device
)
'''

SMASH = '''
from slimkit import smash

smashed_model = smash(
    model=pipe.model,
    smash_config=smash_config,
)
'''


def test_llm_tutorial_config_and_smash_hqq(tmp_path, monkeypatch):
    lm = zoo.load("tiny_llama")

    class Pipe:  # offline: the tutorial's pipeline("text-generation", "HuggingFaceTB/SmolLM2-360M-Instruct")
        model = lm.model

    scope = _run(LLM_TUTORIAL, device="cpu")
    config = scope["smash_config"]
    assert config.get_active_algorithms() == ["hqq", "torch_compile"] and config["hqq_bits"] == 4
    config["compiler"] = None  # compiling takes minutes on this CPU; test_llm_tutorial_with_compile does it
    smashed = _run(SMASH, pipe=Pipe, smash_config=config)["smashed_model"]
    out = smashed(**lm.example_inputs).logits
    assert out.dtype == torch.bfloat16  # compute_dtype
    monkeypatch.chdir(tmp_path)
    _run('smashed_model.save_pretrained("smashed_model")\n', smashed_model=smashed)  # the tutorial's last cell
    loaded = _run('from slimkit import PrunaModel\n\nloaded_model = PrunaModel.from_pretrained("smashed_model")\n')
    assert torch.equal(loaded["loaded_model"](**lm.example_inputs).logits, out)


@pytest.mark.slow
def test_llm_tutorial_with_compile():
    lm = zoo.load("tiny_llama")

    class Pipe:  # offline: the tutorial's SmolLM2 pipeline
        model = lm.model

    scope = _run(LLM_TUTORIAL, device="cpu")
    smashed = _run(SMASH, pipe=Pipe, smash_config=scope["smash_config"])["smashed_model"]
    assert smashed(**lm.example_inputs).logits.shape[-1] == lm.model.config.vocab_size


def test_reasoning_and_acceleration_tutorial_configs():
    reasoning = _run('''
from slimkit import SmashConfig

smash_config = SmashConfig(
    {
        "hqq": {"weight_bits": 8, "compute_dtype": "torch.bfloat16"},
        "torch_compile": {"fullgraph": True, "dynamic": True}
    }
)
''')["smash_config"]
    assert reasoning["hqq_bits"] == 8 and reasoning["torch_compile_dynamic"] is True
    acceleration = _run('''
from slimkit import SmashConfig

smash_config = SmashConfig(
    {
        "hqq":
            {
                # can work with 2, 8 also (but 4 is the best performance)
                "weight_bits": 4,
                # can work with float16, but better performance with bfloat16
                "compute_dtype": "torch.bfloat16"
            },
        "torch_compile": {
            "fullgraph": True,
            "mode": "max-autotune"
            }
    }
)
''')["smash_config"]
    assert acceleration.to_dict()["algorithms"] == {"quantizer": "hqq", "compiler": "torch_compile"}
    diffusion = _run('''
from slimkit import SmashConfig
smash_config = SmashConfig(["hqq", "torch_compile"])
smash_config.add({'torch_compile_mode': 'max-autotune'})
''')["smash_config"]
    assert diffusion["torch_compile_mode"] == "max-autotune"


def test_deepcache_and_cpu_tutorial_configs():
    deepcache = _run('''
from slimkit import SmashConfig

# Initialize the SmashConfig
smash_config = SmashConfig(["deepcache"])
''')["smash_config"]
    assert deepcache["cacher"] == "step_cache" and deepcache["step_cache_interval"] == 3
    cpu = _run('''
from slimkit import SmashConfig

# Initialize the SmashConfig
smash_config = SmashConfig({"torch_compile": {"backend": "inductor"}})
''')["smash_config"]
    assert cpu["torch_compile_backend"] == "inductor"


def test_save_load_user_manual(tmp_path, monkeypatch):
    model, x = zoo.load("mlp")
    monkeypatch.chdir(tmp_path)
    scope = _run('''
from slimkit import PrunaModel, SmashConfig, smash

# Create and smash your model
smash_config = SmashConfig(["torch_dynamic"])
smashed_model = smash(model=base_model, smash_config=smash_config)

# Save the model
smashed_model.save_pretrained("saved_model/")  # or push_to_hub

# Load the model
loaded_model = PrunaModel.from_pretrained("saved_model/")
''', base_model=model)  # offline: the manual loads segmind/Segmind-Vega with hqq_diffusers; mlp + torch_dynamic here
    assert torch.equal(scope["loaded_model"](x), scope["smashed_model"](x))
    assert scope["smashed_model"].applied[0]["name"] == "int8_dynamic"
