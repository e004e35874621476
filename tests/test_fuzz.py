"""Property-based checks with hypothesis: arbitrary text through the tokenizer, random valid shapes and masks through
the model, random valid settings through generate()."""

import unicodedata

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from model_helpers import VOCAB, tiny_model
from tokenizers import normalizers

from modeling.tokenization import train_tokenizer

# derandomized: the same examples on every run, so that a CI run is red only for a change
FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture])

TEXT = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=80)  # any Unicode scalar value


def newer_characters() -> set[str]:
    """The characters on which Python's NFKC and tokenizers' (older Unicode tables) differ: alone (a compatibility
    form), or as a combining mark beside marks of the lowest and highest combining classes (its class)."""
    tokenizers_nfkc = normalizers.NFKC()

    def differs(text):
        return unicodedata.normalize("NFKC", text) != tokenizers_nfkc.normalize_str(text)

    characters = (chr(code) for code in range(0x110000) if not 0xD800 <= code <= 0xDFFF)
    return {c for c in characters
            if differs(c) or (unicodedata.combining(c) and (differs(f"a{c}\u0334") or differs(f"a\u0345{c}")))}


NEWER_CHARACTERS = newer_characters()


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(["Ein Hund läuft.", "A dog runs.", "Žena čte knihu.", "我爱北京"] * 20, vocab_size=300,
                           min_frequency=1)


@FUZZ
@given(text=TEXT)
def test_any_text_round_trips_to_its_nfkc_form(tokenizer, text):
    """The README's promise: decode(encode(text)) == NFKC(text), whatever the script, whitespace or control
    characters; never <unk>, and the only special token is the closing </s>."""
    ids = tokenizer(text)["input_ids"]
    assert ids[-1] == tokenizer.eos_token_id and tokenizer.unk_token_id not in ids
    assert not set(ids[:-1]) & {tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id}
    decoded = tokenizer.decode(ids, skip_special_tokens=True)
    assert decoded == tokenizer.backend_tokenizer.normalizer.normalize_str(text)[1:]  # less the prepended space
    if not set(text) & NEWER_CHARACTERS:
        assert decoded == unicodedata.normalize("NFKC", text)


def test_tokenizers_nfkc_differs_from_python_s_only_on_few_recent_characters():
    """The round trip's exception (modeling/tokenization.py): few characters, for one Unicode version of tokenizers'
    tables and Python's (a newer Python's tables add to them); a compatibility form keeps its form, a mark its place."""
    assert "\U0001FBF0" in NEWER_CHARACTERS and "\u32ff" in NEWER_CHARACTERS and "\u07fd" in NEWER_CHARACTERS
    assert len(NEWER_CHARACTERS) < 500
    assert normalizers.NFKC().normalize_str("\u32ff") == "\u32ff" != unicodedata.normalize("NFKC", "\u32ff")
    assert normalizers.NFKC().normalize_str("a\u07fd\u0301") == "a\u07fd\u0301"  # Python: "\xe1\u07fd"
    assert not {"ﬁ", "\u00a0", "Ａ", "\u0301", "é"} & NEWER_CHARACTERS  # the forms NFKC is there for


@st.composite
def padded_batches(draw):
    batch = draw(st.integers(1, 4))
    source_length, target_length = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    lengths = draw(st.lists(st.integers(1, source_length), min_size=batch, max_size=batch))
    seed = draw(st.integers(0, 2**16))
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, VOCAB, (batch, source_length), generator=generator)
    attention_mask = (torch.arange(source_length) < torch.tensor(lengths)[:, None]).long()
    decoder_input_ids = torch.randint(0, VOCAB, (batch, target_length), generator=generator)
    return input_ids, attention_mask, decoder_input_ids


@FUZZ
@given(batch=padded_batches(), norm_first=st.booleans(), tie=st.booleans(),
       attention=st.sampled_from(["eager", "sdpa"]), train=st.booleans())
def test_forward_is_finite_for_any_valid_shapes_and_masks(batch, norm_first, tie, attention, train):
    input_ids, attention_mask, decoder_input_ids = batch
    model = tiny_model(seed=0, norm_first=norm_first, tie_word_embeddings=tie)
    model.set_attn_implementation(attention)
    model.train(train)
    labels = decoder_input_ids.roll(-1, dims=1)
    output = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                   labels=labels)
    assert torch.isfinite(output.logits).all()
    assert torch.isfinite(output.loss)


@FUZZ
@given(batch=padded_batches(), num_beams=st.integers(1, 4), do_sample=st.booleans(),
       max_new_tokens=st.integers(1, 10), num_return=st.integers(1, 2))
def test_generate_returns_valid_ids_for_any_valid_settings(batch, num_beams, do_sample, max_new_tokens, num_return):
    input_ids, attention_mask, _ = batch
    num_return = min(num_return, num_beams)
    model = tiny_model(seed=1)
    generated = model.generate(input_ids, attention_mask=attention_mask, num_beams=num_beams, do_sample=do_sample,
                               max_new_tokens=max_new_tokens, num_return_sequences=num_return)
    assert generated.shape[0] == input_ids.shape[0] * num_return
    assert 2 <= generated.shape[1] <= max_new_tokens + 1
    assert (generated[:, 0] == model.config.decoder_start_token_id).all()
    assert ((generated >= 0) & (generated < VOCAB)).all()
