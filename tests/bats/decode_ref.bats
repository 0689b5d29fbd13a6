#!/usr/bin/env bats
# nmt-decode against a PyTorch greedy decode of the same checkpoint (tests/ref/make_decode_fixtures.py:
# a small model of a synthetic word-for-word translation task, 40 sentences of 1 to 16 words).

load common

@test "greedy translations equal PyTorch's on the fixture set" {
    F="$NMT_SRCDIR/tests/fixtures/ref/decode"
    nmt-decode -m "$F/model.ckpt" --out hyp < "$F/src.en" | nmt-cat | cut -f4 > "$BATS_TEST_TMPDIR/ours"
    [ "$(wc -l < "$BATS_TEST_TMPDIR/ours")" -eq 40 ]
    diff "$BATS_TEST_TMPDIR/ours" "$F/greedy.ids"
}

@test "beam 1 gives the same ids as PyTorch's greedy decode" {
    F="$NMT_SRCDIR/tests/fixtures/ref/decode"
    nmt-decode -m "$F/model.ckpt" --beam 1 --batch-variant --out hyp < "$F/src.en" | nmt-cat | cut -f4 > "$BATS_TEST_TMPDIR/ours"
    diff "$BATS_TEST_TMPDIR/ours" "$F/greedy.ids"
}

@test "greedy translations equal PyTorch's when the set is cut into many small batches" {
    F="$NMT_SRCDIR/tests/fixtures/ref/decode"
    nmt-decode -m "$F/model.ckpt" --max-tokens 40 --out hyp < "$F/src.en" | nmt-cat | cut -f4 > "$BATS_TEST_TMPDIR/ours"
    diff "$BATS_TEST_TMPDIR/ours" "$F/greedy.ids"
}

@test "the fixture set exercises the source: outputs are distinct and of many lengths" {
    F="$NMT_SRCDIR/tests/fixtures/ref/decode"
    [ "$(sort -u "$F/greedy.ids" | wc -l)" -ge 30 ]
    [ "$(awk '{print NF}' "$F/greedy.ids" | sort -u | wc -l)" -ge 8 ]
}
