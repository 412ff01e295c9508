"""NSAVarlenFwd against its fp32 reference: every seed row (shrunk on CPU), empty selections, padding forms,
causal edges, GQA / head-dim edge cases, every launch config, bad input."""

import pytest
import torch
import triton
from nsa_testlib import DEV, check_with_config, config_params, f16, i32, run_bad_input

from attnops.attn_nsa import nsa_varlen_fwd
from attnops.attn_nsa.nsa_varlen_fwd import op, reference
from attnops.attn_nsa.nsa_varlen_fwd.spec import SPEC, build_case, empty_rows, make_case
from attnops.kernel_utils import reliability, testing
from attnops.kernel_utils.pytest_plugin import row_seed, seed_rows

ROWS = {w.id.split("/")[1]: w for w in SPEC.workloads}


def admits(config, case) -> bool:
    """Whether ``_run`` accepts ``config`` for this case (shape limits; TMA configs only where this device and
    the case's K / V allow TMA)."""
    x = case.inputs
    d = x["k"].shape[2]
    return op._valid(config, {"BS": x["block_size"], "BD": max(16, triton.next_power_of_2(d)),
                              "SEL": x["block_indices"].shape[2], "tma": op.tma_applies(x["k"], x["v"])})


@pytest.mark.parametrize("w", seed_rows(SPEC), ids=lambda w: w.id)
def test_seed_row_shrunk(w):
    """Kernel path per seed row (<= 3 sequences of <= 3 blocks + ragged tail); the bf16 row runs on the GPU."""
    SPEC.check(make_case(w, DEV, shrink=True, seed=row_seed(w)))


@pytest.mark.gpu
@pytest.mark.parametrize("w", SPEC.workloads, ids=lambda w: w.id)
def test_seed_row_full_size(w):
    SPEC.check(make_case(w, DEV, shrink=False, seed=7))


def test_ragged_row_in_f16():
    """The bf16 seed row's shape class (GQA 32:2, D 128, SEL 8, scale 128^-0.5) in f16 on the CPU, on two
    short ragged sequences."""
    w = ROWS["prefill-ragged"]
    _, h, d = w.shape("q")
    case = build_case([33, 70], h, w.shape("k")[1], d, torch.float16, w.shape("block_indices")[2],
                      w.params["block_size"], True, w.params["scale"], DEV, seed=11)
    SPEC.check(case)


@pytest.mark.parametrize(
    "lengths,h,h_kv,d,sel,bs,causal",
    [
        # zero-length sequences, shorter than a block, tails; non-causal sees the whole sequence
        ([0, 20, 0, 77, 0], 16, 1, 64, 3, 32, False),
        ([0, 20, 0, 77, 0], 16, 1, 64, 3, 32, True),
        # bs 64, GQA 32:2, D 128
        ([100, 30], 64, 2, 128, 2, 64, True),
        # G = 4 (padded to 16 rows), head dim 80 (padded to 128), bs 16
        ([50, 33], 8, 2, 80, 4, 16, False),
    ],
    ids=["noncausal-empty-short", "causal-empty-short", "bs64-gqa32-d128", "g4-d80-bs16"],
)
def test_edge_shapes(lengths, h, h_kv, d, sel, bs, causal):
    SPEC.check(build_case(lengths, h, h_kv, d, torch.float16, sel, bs, causal, d**-0.5, DEV, seed=sum(lengths)))


def test_empty_selections_are_zero():
    """block_counts = 0 on every other (token, KV head): those query heads output exact zeros."""
    case = build_case([60, 45], 32, 2, 64, torch.float16, 4, 32, True, 0.125, DEV, seed=2)
    case.inputs["block_counts"][::2, 0] = 0
    case.inputs["block_counts"][1::3, 1] = 0
    assert bool(empty_rows(case).any())
    SPEC.check(case)


@pytest.mark.parametrize("pad", ["minus-one", "t-q", "past-the-sequence"])
def test_padding_forms(pad):
    """Unused slots may hold −1 (the selector's padding), T_q (the page's) or any block past the sequence;
    block_counts = SEL so every slot is read."""
    case = build_case([70, 100], 16, 1, 64, torch.float16, 4, 32, False, 0.125, DEV, seed=3,
                      pad={"minus-one": -1, "t-q": None, "past-the-sequence": 5}[pad])
    case.inputs["block_counts"].fill_(4)
    SPEC.check(case)


def test_causal_block_edges():
    """Causal: the current block contributes only keys <= t; a block starting after t contributes nothing,
    so a token whose every slot lies in its future outputs zeros."""
    case = build_case([96], 16, 1, 64, torch.float16, 2, 32, True, 0.125, DEV, seed=4)
    ids = case.inputs["block_indices"]
    t = torch.arange(96, device=DEV)
    ids[:, 0, 0] = (t // 32).to(torch.int32)  # own block: partial
    ids[:, 0, 1] = (t // 32 + 1).to(torch.int32)  # next block: in the future (past the end for the last)
    ids[:40, 0, 0] = 2  # tokens 0..39: only future blocks
    case.inputs["block_counts"].fill_(2)
    assert bool(empty_rows(case)[:32].all())
    SPEC.check(case)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "noncausal"])
def test_reference_in_token_chunks_matches_whole_sequences(causal, monkeypatch):
    """The reference gathers up to ``TOKENS_PER_GATHER`` tokens at a time (GPU memory): chunks of 7 tokens, across
    sequence starts and a partial last chunk, give the bits of whole sequences."""
    case = build_case([40, 0, 70, 9], 16, 2, 64, torch.float16, 3, 16, causal, 0.125, DEV, seed=14)
    whole = case.fresh().run(SPEC.reference)
    monkeypatch.setattr(reference, "TOKENS_PER_GATHER", 7)
    chunked = case.fresh().run(SPEC.reference)
    for name in whole:
        assert torch.equal(whole[name], chunked[name]), name


def test_repeated_ids_count_twice():
    """Slots are independent: a block id listed twice contributes its keys twice (spec); the reference
    gathers it twice as well."""
    case = build_case([64, 64], 16, 1, 64, torch.float16, 3, 32, False, 0.125, DEV, seed=5)
    case.inputs["block_indices"][:, 0, :] = torch.tensor([0, 0, 1], dtype=torch.int32, device=DEV)
    case.inputs["block_counts"].fill_(3)
    SPEC.check(case)


def test_strided_qkv():
    """q, k, v as head slices of one packed qkv tensor."""
    case = build_case([40, 70], 16, 1, 64, torch.float16, 3, 32, True, 0.125, DEV, seed=6)
    t = case.inputs["q"].shape[0]
    qkv = testing.randn((t, 18, 64), torch.float16, DEV, testing.generator(7))
    case.inputs.update(q=qkv[:, :16], k=qkv[:, 16:17], v=qkv[:, 17:])
    SPEC.check(case)


def test_broadcast_kv_rows_take_the_pointer_gather():
    """K / V broadcast over tokens (token stride 0) are valid inputs but overlapping rows: no TMA box for them."""
    case = build_case([40, 70], 16, 1, 64, torch.float16, 3, 32, True, 0.125, DEV, seed=11)
    x = case.inputs
    x["k"] = x["k"][:1].expand_as(x["k"])
    x["v"] = x["v"][:1].expand_as(x["v"])
    assert not op.tma_applies(x["k"], x["v"])
    SPEC.check(case)


@pytest.mark.parametrize("config", config_params(op.CONFIGS))
def test_rows_outside_the_selection_never_reach_the_output(config):
    """A TMA box covers whole tensor rows: with id −1 the box of sequence 1 lies over sequence 0's last 32 rows.
    Those rows hold inf / NaN (sequence 0 selects nothing, so its output is zeros by the spec): they must add
    nothing to sequence 1 (0 · inf would be NaN)."""
    case = build_case([40, 70], 16, 1, 64, torch.float16, 3, 32, True, 0.125, DEV, seed=10)
    if not admits(config, case):
        pytest.skip("config not valid for this shape / device")
    x = case.inputs
    x["k"][:40] = float("nan")
    x["v"][:40] = float("inf")
    x["block_counts"][:40] = 0
    x["block_indices"][40:, :, 0] = -1
    check_with_config(SPEC, op._run, case, config)


TMA_CONFIGS = [c for c in op.CONFIGS if c.kwargs["TMA"] and c.num_stages == 2]


@pytest.mark.parametrize("config", config_params(TMA_CONFIGS))
def test_tma_configs_on_fuzz_cases(config):
    """The TMA paths on the fuzz generator's cases where TMA applies (ragged and empty sequences, padding forms,
    repeated and out-of-range ids, packed qkv): the first ATTNOPS_FUZZ_CASES (default 4) such cases; the
    public op's fuzz runs the pointer gather under the interpreter."""
    if not (op.runtime.interpreting() or op.runtime.is_hopper()):
        pytest.skip("TMA needs Hopper (or the interpreter)")
    wanted, done = reliability.fuzz_cases(4), 0
    for seed in reliability.fuzz_seeds(SPEC, 50 * wanted):
        case = SPEC.fuzz(seed, DEV)
        if admits(config, case):
            check_with_config(SPEC, op._run, case, config)
            done += 1
            if done == wanted:
                return
    pytest.fail(f"only {done} of the first {50 * wanted} fuzz cases admit {config}")


@pytest.mark.parametrize("config", config_params(op.CONFIGS))
def test_every_config_small(config):
    """Each autotune config (constexpr path) that this shape admits: SEL 5 (KB 1, 2, 4 all valid at D 64)."""
    case = build_case([40, 70], 16, 1, 64, torch.float16, 5, 16, True, 0.125, DEV, seed=8)
    if not admits(config, case):
        pytest.skip("config not valid for this shape / device")
    check_with_config(SPEC, op._run, case, config)


MULTI_TOKEN_CONFIGS = [c for c in op.CONFIGS if c.kwargs["NT"] > 1]


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "noncausal"])
@pytest.mark.parametrize("config", config_params(MULTI_TOKEN_CONFIGS))
def test_multi_token_programs_at_their_boundaries(config, causal):
    """Several tokens per program: programs that span zero-length and short sequences (their positions, key
    ranges and block ids change inside one program's loop), empty selections before, between and after
    selected tokens (one keyless step each: zeros), a last program with fewer than NT tokens (107 tokens),
    and a first slot of −1 (the token's state must not carry the previous token's)."""
    case = build_case([0, 3, 0, 37, 1, 66, 0], 16, 1, 64, torch.float16, 3, 16, causal, 0.125, DEV, seed=12)
    if not admits(config, case):
        pytest.skip("config not valid for this shape / device")
    x = case.inputs
    x["block_counts"][5::7] = 0
    x["block_counts"][6::7] = 0
    x["block_indices"][::5, :, 0] = -1
    assert bool(empty_rows(case).any()) and x["q"].shape[0] % config.kwargs["NT"] != 0
    check_with_config(SPEC, op._run, case, config)


@pytest.mark.gpu
@pytest.mark.parametrize("config", config_params(op.CONFIGS))
@pytest.mark.parametrize(
    "dtype,d,h,h_kv,bs,sel,causal",
    [
        (torch.float16, 64, 16, 1, 32, 4, True),
        (torch.bfloat16, 128, 32, 2, 32, 8, True),
        (torch.float16, 64, 16, 1, 32, 4, False),
        (torch.bfloat16, 64, 16, 1, 64, 16, True),
    ],
    ids=["f16-d64", "bf16-d128", "f16-noncausal", "bf16-bs64-sel16"],
)
def test_every_config_gpu(config, dtype, d, h, h_kv, bs, sel, causal):
    case = build_case([257, 767, 4000, 4190], h, h_kv, d, dtype, sel, bs, causal, d**-0.5, DEV, seed=9)
    if not admits(config, case):
        pytest.skip("config not valid for this shape / device")
    check_with_config(SPEC, op._run, case, config)


def _bad(**changes):
    case = build_case([40, 70], 32, 2, 64, torch.float16, 4, 32, True, 0.125, DEV, seed=1)
    case.inputs.update(changes)
    return case.inputs


BAD_INPUTS = {
    "q dtype": (lambda: _bad(q=f16((110, 32, 64)).float()), TypeError, "q: expected dtype float16 or bfloat16"),
    "k tokens": (lambda: _bad(k=f16((100, 2, 64))), ValueError, r"k: expected shape .*got \(100, 2, 64\)"),
    "v heads": (lambda: _bad(v=f16((110, 1, 64))), ValueError, r"v: expected shape .*got \(110, 1, 64\)"),
    "head dim too large": (lambda: _bad(q=f16((110, 32, 256)), k=f16((110, 2, 256)), v=f16((110, 2, 256))),
                           ValueError, r"q: head dim must lie in \[1, 128\], got 256"),
    "block_indices dtype": (lambda: _bad(block_indices=torch.zeros(110, 2, 4, dtype=torch.int64, device=DEV)),
                            TypeError, "block_indices: expected dtype int32"),
    "block_indices heads": (lambda: _bad(block_indices=torch.zeros(110, 1, 4, dtype=torch.int32, device=DEV)),
                            ValueError, r"block_indices: expected shape .*got \(110, 1, 4\)"),
    "block_counts above SEL": (lambda: _bad(block_counts=torch.full((110, 2), 5, dtype=torch.int32, device=DEV)),
                               ValueError, r"block_counts: entries must lie in \[0, 5\), got 5"),
    "block_counts negative": (lambda: _bad(block_counts=torch.full((110, 2), -1, dtype=torch.int32, device=DEV)),
                              ValueError, r"block_counts: entries must lie in \[0, 5\), got -1"),
    "offsets inconsistent": (lambda: _bad(offsets=i32([0, 50, 110])), ValueError,
                             r"token_indices: row 40 is \(1, 0\), but offsets place packed token 40 at .* \(0, 40\)"),
    "offsets total": (lambda: _bad(offsets=i32([0, 40, 111])), ValueError,
                      "offsets: last entry must equal the packed length 110"),
    "block_size not a power of two": (lambda: _bad(block_size=48), ValueError,
                                      "block_size: must be a power of two, got 48"),
    "block_size too small": (lambda: _bad(block_size=8), ValueError, r"block_size: must lie in \[16, 128\]"),
    "is_causal not bool": (lambda: _bad(is_causal=1), TypeError, "is_causal: expected a bool"),
    "scale zero": (lambda: _bad(scale=0.0), ValueError, "scale: must be finite and > 0"),
    "k on another dtype": (lambda: _bad(k=f16((110, 2, 64)).bfloat16()), TypeError, "k: expected dtype float16"),
}


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_input_is_rejected_before_launch(name, monkeypatch):
    monkeypatch.setenv("ATTNOPS_VALIDATE", "1")  # value checks also for CUDA tensors
    make_inputs, error, message = BAD_INPUTS[name]
    run_bad_input(nsa_varlen_fwd, make_inputs(), error, message)


@pytest.mark.parametrize("bd, sel, tma, want", [(64, 4, True, (1, 1, None)), (64, 1, True, (4, 0, 128)),
                                                (128, 8, True, (1, 1, None)), (64, 1, False, (4, 0, 128)),
                                                (128, 1, False, (1, 1, None))])
def test_gpu_default_is_the_sweep_winner(monkeypatch, bd, sel, tma, want):
    """On the GPU the default rule names the config the H200 sweeps measured fastest (KB 1, 2 stages, 1 warp, the
    pointer gather): four tokens per program at 128 registers for one-block selections at D <= 64, else one
    token per program with int32 rows."""
    monkeypatch.setattr(op.runtime, "interpreting", lambda: False)
    args = {"BS": 32, "BD": bd, "SEL": sel, "tma": tma}
    c = op._default(op._TUNED.valid_configs(args), args)
    assert (c.kwargs["KB"], c.num_stages, c.kwargs["TMA"], c.num_warps) == (1, 2, 0, 1)
    assert (c.kwargs["NT"], c.kwargs["INT32_ROWS"], c.maxnreg) == want


def test_custom_op_schema_and_fake():
    """attnops::nsa_varlen_fwd as the public function calls it: no argument written, and a fake impl whose output
    matches the kernel's."""
    case = build_case([40, 25], 8, 2, 64, torch.float16, 3, 16, True, 0.125, DEV, seed=24)
    testing.opcheck_as_called(op, "_nsa_varlen", lambda: case.run(nsa_varlen_fwd))
