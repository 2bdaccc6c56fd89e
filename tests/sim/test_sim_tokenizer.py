"""The sim tokenizer: deterministic, lossless, fast, and a chat template that shapes the prefix."""

import random
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.sim.tokenizer import EOS_TOKEN_ID, SPECIAL_TOKENS, SimTokenizer, render_chat

TOK = SimTokenizer()


def test_same_text_same_ids_in_a_fresh_instance() -> None:
    text = "The quick brown fox, 2024 edition:\n\tjumps!"
    assert SimTokenizer().encode(text) == TOK.encode(text)


def test_counts_are_exact_for_known_pieces() -> None:
    # "Hello" -> H|ell|o, "," , " world" -> " wor"|ld, "!"
    assert TOK.count("Hello, world!") == 7
    # a pseudo-word is one token, a 7-digit number is three groups
    assert TOK.count(" bako") == 1
    assert TOK.count(" 1234567") == 3


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=200))
def test_decode_of_encode_is_the_text(text: str) -> None:
    assert TOK.decode(TOK.encode(text)) == text


@pytest.mark.parametrize("seed", range(5))
def test_generated_ids_survive_a_text_round_trip(seed: int) -> None:
    ids = TOK.generator(seed).take(5000)
    assert TOK.encode(TOK.decode(ids)) == ids


def test_generator_is_deterministic_across_take_calls() -> None:
    whole = TOK.generator(7).take(300)
    gen = TOK.generator(7)
    assert gen.take(100) + gen.take(200) == whole
    assert TOK.generator(8).take(300) != whole


def test_generated_text_has_no_special_tokens() -> None:
    ids = TOK.generator(3).take(20_000)
    assert min(ids) >= len(SPECIAL_TOKENS)


def test_non_ascii_falls_back_to_utf8_bytes() -> None:
    ids = TOK.encode("é")
    assert len(ids) == 2  # two UTF-8 bytes
    assert TOK.decode(ids) == "é"


def test_special_tokens_are_single_ids() -> None:
    assert TOK.encode("<|im_start|>user") == [1, *TOK.encode("user")]
    assert TOK.decode([EOS_TOKEN_ID]) == "<|endoftext|>"
    assert TOK.decode([EOS_TOKEN_ID], skip_special_tokens=True) == ""


def test_decode_rejects_ids_outside_the_vocabulary() -> None:
    with pytest.raises(ValueError, match="outside the vocabulary"):
        TOK.decode([TOK.vocab_size])


def test_a_100k_token_prompt_round_trips() -> None:
    rng = random.Random(1)
    words = [
        " " + "".join(rng.choices(string.ascii_letters, k=rng.randint(2, 11)))
        for _ in range(45_000)
    ]
    text = "".join(words)
    ids = TOK.encode(text)
    assert len(ids) > 100_000
    assert TOK.decode(ids) == text


def test_chat_template_renders_chatml_with_generation_prompt() -> None:
    text = render_chat([{"role": "user", "content": "hi"}])
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert TOK.apply_chat_template([{"role": "user", "content": "hi"}]) == text


def test_template_kwargs_change_the_very_start_of_the_prompt() -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    on = TOK.encode(render_chat(messages, {"enable_thinking": True}))
    off = TOK.encode(render_chat(messages, {"enable_thinking": False}))
    first_difference = next(i for i, (a, b) in enumerate(zip(on, off, strict=False)) if a != b)
    # inside the first 16-token block, so no block of the prompt can be reused
    assert first_difference == 5
    assert render_chat(messages, {"enable_thinking": False}).startswith(
        "<|im_start|>system\n/no_think\nbe brief<|im_end|>\n"
    )


# Text built from the pieces that decide where the pre-split cuts: every whitespace kind
# (incl. Unicode spaces and runs longer than one token), letters of both cases, digits,
# punctuation, non-ASCII letters and symbols, and the special tokens themselves.
_PARTS = st.sampled_from(
    [*SPECIAL_TOKENS, " ", "  ", "\n", "\n\n", "\t", "\r\n", "\u00a0", "\u3000", " " * 20,
     "a", "Ab", "XYZ", "word", " bako", "7", "1234567", ".", ",", "<", "|>", "é", "日本", "🙂"]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(_PARTS, max_size=60), st.integers(min_value=1, max_value=40))
def test_encode_slices_join_to_exactly_encode(parts: list[str], slice_chars: int) -> None:
    text = "".join(parts)
    slices = list(TOK.encode_slices(text, slice_chars))
    assert [i for s in slices for i in s] == TOK.encode(text)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["system", "user", "assistant"]), st.text()), max_size=6),
       st.booleans(), st.integers(min_value=1, max_value=64))  # fmt: skip
def test_encode_slices_of_chat_prompts_join_to_exactly_encode(
    turns: list[tuple[str, str]], thinking: bool, slice_chars: int
) -> None:
    messages = [{"role": role, "content": content} for role, content in turns]
    text = render_chat(messages, {"enable_thinking": thinking})
    joined = [i for s in TOK.encode_slices(text, slice_chars) for i in s]
    assert joined == TOK.encode(text)


def test_encode_slices_cut_a_long_prompt_into_parts_of_the_asked_size() -> None:
    text = TOK.decode(TOK.generator(3).take(20_000))
    slices = list(TOK.encode_slices(text, 16_384))
    texts = [TOK.decode(s) for s in slices]
    assert "".join(texts) == text
    assert len(slices) > 1
    # every part but the last covers >= 16,384 characters: a cut waits for the next space
    assert all(len(t) >= 16_384 for t in texts[:-1])
    assert all(len(t) < 16_384 + 20 for t in texts)  # generated words are short
    assert [i for s in slices for i in s] == TOK.encode(text)
    assert list(TOK.encode_slices("", 8)) == []
    assert list(TOK.encode_slices("x" * 50, 8)) == [TOK.encode("x" * 50)]  # no space: no cut
