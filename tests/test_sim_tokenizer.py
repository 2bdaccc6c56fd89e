"""The sim tokenizer: deterministic, lossless, fast, and a chat template that shapes the prefix."""

import random
import string
import time

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


def test_a_100k_token_prompt_tokenizes_well_under_a_second() -> None:
    rng = random.Random(1)
    words = [
        " " + "".join(rng.choices(string.ascii_letters, k=rng.randint(2, 11)))
        for _ in range(45_000)
    ]
    text = "".join(words)
    t0 = time.perf_counter()
    ids = TOK.encode(text)
    elapsed = time.perf_counter() - t0
    assert len(ids) > 100_000
    assert elapsed < 1.0
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
