"""TopKSelectFwd against its reference: every seed row (shrunk on CPU), each launch config, windows, ties,
strided and grouped scores, bad input. The edge cases run both register selects (bitwise and radix) and the
split path (a row over several programs) with both selects."""

import dataclasses

import pytest
import torch
from mla_testlib import every_config, pinned

from attnops.attn_mla import topk_select_fwd
from attnops.attn_mla.topk_select_fwd import op as topk_op
from attnops.attn_mla.topk_select_fwd.spec import SPEC, make_case
from attnops.kernel_utils import runtime, testing
from attnops.kernel_utils.opspec import Case
from attnops.kernel_utils.pytest_plugin import row_seed, seed_rows

DEV = runtime.device()
ROWS = {w.name: w for w in SPEC.workloads}
# The picked config with the other register select (radix <-> bitwise): both run every edge case.
SELECTS = (topk_op.pick_config(), dataclasses.replace(topk_op.pick_config(), radix=not topk_op.pick_config().radix))
# The split path sized for shrunk rows (a few hundred keys per program), with either last-program select, and with
# the candidates ranked by a third launch instead (32 or 8 a program).
SPLITS = (topk_op.CONFIGS["interpreter-split"], dataclasses.replace(topk_op.CONFIGS["interpreter-split"], radix=True),
          dataclasses.replace(topk_op.CONFIGS["interpreter-split"], rank_launch=True),
          dataclasses.replace(topk_op.CONFIGS["interpreter-split"], rank_launch=True, rank_slice=8, rank_block=64))
SPLIT_IDS = ("bitwise", "radix", "rank-s32", "rank-s8")


@pytest.mark.parametrize(
    "w",
    seed_rows(SPEC),
    ids=lambda w: w.id,
)
def test_seed_row_shrunk(w):
    """Kernel path per seed row: 3 rows × 3001 keys, topk scaled down with the row (sample path)."""
    assert SPEC.check(make_case(w, DEV, shrink=True, seed=row_seed(w)))["indexes"].dtype == torch.int32


@pytest.mark.gpu
@pytest.mark.parametrize("w", SPEC.workloads, ids=lambda w: w.id)
def test_seed_row_full_size(w):
    """Full 32768 × 65536 rows (8.6 GB of scores): the reference loops over rows on the GPU."""
    SPEC.check(make_case(w, DEV, shrink=False, seed=7))


@pytest.mark.parametrize("name", sorted(topk_op.CONFIGS))
def test_every_config_shrunk(name):
    """Each launch config (the H200 one included) on a shrunk row."""
    SPEC.check(
        make_case(ROWS["ds-v32-topk-decode-b1"], DEV, shrink=True, seed=5), pinned(topk_op, topk_op.CONFIGS[name])
    )


@pytest.mark.gpu
@pytest.mark.timeout(900)  # six configs on 8.6 GB of scores: over 240 s beside three other test shards (H200)
@pytest.mark.parametrize("w", SPEC.workloads, ids=lambda w: w.id)
def test_every_config_full_size(w):
    """Every config on the full rows (8.6 GB of scores); one reference per row (a loop of 32768 sorts)."""
    SPEC.check_each(make_case(w, DEV, shrink=False, seed=11), every_config(topk_op))


def _case(scores: torch.Tensor, starts, ends, topk: int) -> Case:
    b, s = scores.shape[:2]
    as_tensor = lambda v: torch.tensor(v, dtype=torch.int32).reshape(b, s).to(DEV)
    return Case(
        {"index_score": scores.to(DEV), "starts": as_tensor(starts), "ends": as_tensor(ends), "topk": topk},
        outputs=("indexes",),
    )


def _scores(b, s, s_kv, g=1, seed=0):
    return testing.randn((b, s, s_kv, g), torch.float32, DEV, testing.generator(seed))


def test_windows_of_every_kind():
    """Empty (ends <= starts), clipped at both ends, shorter than topk (padding), exactly topk, within CAP
    (selected directly), and long enough for the sample path, in one call with two requests."""
    s_kv, topk = 1500, 40
    starts = [[0, 10, 900, -50, 0, 3], [700, 0, 0, 1200, 5, 100]]
    ends = [[0, 5, 940, 30, 1500, 3000], [1800, 40, 150, 1439, 1400, 101]]
    case = _case(_scores(2, 6, s_kv, seed=1), starts, ends, topk)
    for config in (*SELECTS, *SPLITS, topk_op.CONFIGS["fallback"]):
        got = SPEC.check(case, pinned(topk_op, config))["indexes"].cpu()
        assert bool((got[0, 0] == s_kv).all()) and bool((got[0, 1] == s_kv).all()), "empty window pads fully"
        assert int((got[1, 5] != s_kv).sum()) == 1, "a one-key window selects exactly that key"


def test_ties_go_to_the_lower_position():
    """Scores with 5 distinct values (-inf, -0.0 and +0.0 among them): the tie at the threshold is broken
    by position, so the set equals the reference's exactly, in the window and scratch selects (default config)
    and in the whole-row select (fallback config)."""
    gen = testing.generator(3)
    levels = torch.tensor([float("-inf"), -0.0, 0.0, 1.0, 2.0])
    scores = levels[torch.randint(0, 5, (1, 3, 1800, 1), generator=gen)]
    case = _case(scores, [[0, 100, 0]], [[1800, 1700, 50]], 300)
    expected = case.fresh().run(SPEC.reference)["indexes"].cpu()
    for config in (*SELECTS, *SPLITS, topk_op.CONFIGS["fallback"]):
        got = SPEC.check(case, pinned(topk_op, config))["indexes"].cpu()
        assert torch.equal(got.sort(-1).values, expected.sort(-1).values)


@pytest.mark.parametrize("config", SELECTS + SPLITS,
                         ids=lambda c: ("split-" if c.split_chunk else "")
                         + (f"rank-s{c.rank_slice}" if c.rank_launch else "radix" if c.radix else "bitwise"))
def test_all_minus_inf_row_is_still_selected(config):
    """In-window −inf scores are eligible: a row of only −inf returns the first topk positions."""
    scores = torch.full((1, 1, 2000, 1), float("-inf"))
    case = _case(scores, [[0]], [[2000]], 64)
    got = SPEC.check(case, pinned(topk_op, config))["indexes"].cpu()
    assert torch.equal(got.reshape(-1).sort().values, torch.arange(64, dtype=torch.int32))


@pytest.mark.parametrize("seed", range(4))
def test_radix_and_bitwise_selects_agree(seed):
    """Rows drawn to stress the digit steps: scores on few levels (ties inside a digit bin), both signs, ±0.0,
    ±inf, values that differ only in the low mantissa bits (the last digit decides), windows of every length
    class; both selects must equal the reference exactly (as sets)."""
    gen = testing.generator(40 + seed)
    s_kv, topk = 2500, 37 + 29 * seed
    base = torch.randn((2, 4, s_kv, 1), generator=gen)
    near = 1.0 + torch.randint(0, 64, base.shape, generator=gen) * 2.0 ** -23  # one exponent, low bits differ
    levels = torch.tensor([float("-inf"), -2.0, -0.0, 0.0, 0.5, float("inf")])[torch.randint(0, 6, base.shape,
                                                                                              generator=gen)]
    scores = base.clone()  # rows: normal, near-equal, few levels, near-equal negative
    scores[:, 1], scores[:, 2], scores[:, 3] = near[:, 1], levels[:, 2], -near[:, 3]
    starts = torch.randint(-40, s_kv, (2, 4), generator=gen)
    ends = starts + torch.randint(0, s_kv, (2, 4), generator=gen)
    case = _case(scores, starts.tolist(), ends.tolist(), topk)
    expected = case.fresh().run(SPEC.reference)["indexes"].cpu().sort(-1).values
    for config in SELECTS + SPLITS:
        got = SPEC.check(case, pinned(topk_op, config))["indexes"].cpu()
        assert torch.equal(got.sort(-1).values, expected), config


def test_groups_and_strided_scores():
    """G = 3 groups sharing one window per row; scores a transposed view of a [B, S, G, S_kv] tensor."""
    base = testing.randn((2, 3, 3, 1300), torch.float32, DEV, testing.generator(4))
    case = _case(base.transpose(2, 3), [[0, 100, 7], [0, 0, 1200]], [[1300, 1290, 60], [1, 1300, 1300]], 77)
    assert not case.inputs["index_score"].is_contiguous()
    SPEC.check(case)


def test_topk_equal_to_s_kv():
    case = _case(_scores(1, 2, 300, seed=6), [[0, 20]], [[300, 300]], 300)
    SPEC.check(case)


def test_zero_rows():
    case = _case(torch.empty(1, 0, 50, 1), [], [], 4)
    case.inputs["starts"] = torch.empty(1, 0, dtype=torch.int32, device=DEV)
    case.inputs["ends"] = torch.empty(1, 0, dtype=torch.int32, device=DEV)
    assert topk_select_fwd(**case.inputs).shape == (1, 0, 1, 4)


def _bad(**changes):
    inputs = dict(_case(_scores(1, 2, 100), [[0, 0]], [[100, 100]], 8).inputs)
    inputs.update(changes)
    return inputs


_i32 = lambda *shape: torch.zeros(shape, dtype=torch.int32, device=DEV)

BAD_INPUTS = {
    "score dtype": (lambda: _bad(index_score=_scores(1, 2, 100).half()), TypeError, "index_score: expected dtype"),
    "score dims": (lambda: _bad(index_score=_scores(1, 2, 100)[..., 0]), ValueError, "index_score: expected 4 dims"),
    "starts dtype": (lambda: _bad(starts=_i32(1, 2).long()), TypeError, "starts: expected dtype int32"),
    "ends shape": (lambda: _bad(ends=_i32(2, 1)), ValueError, "ends: expected shape"),
    "topk zero": (lambda: _bad(topk=0), ValueError, "topk: must satisfy 0 < topk <= S_kv = 100"),
    "topk too large": (lambda: _bad(topk=101), ValueError, "topk: must satisfy"),
    "topk not int": (lambda: _bad(topk=8.0), TypeError, "topk: expected an int"),
    "score not a tensor": (lambda: _bad(index_score=[1.0]), TypeError, "index_score: expected a torch.Tensor"),
}


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_input_is_rejected_before_launch(name, monkeypatch):
    monkeypatch.setenv("ATTNOPS_VALIDATE", "1")  # value checks also for CUDA tensors (default: CPU tensors only)
    make_inputs, error, message = BAD_INPUTS[name]
    with pytest.raises(error, match=message):
        topk_select_fwd(**make_inputs())


def test_custom_op_schema_and_fake():
    """torch.ops.attnops.topk_select_fwd, on the arguments the public function passes: schema and fake (meta)
    implementation agree with the kernel."""
    case = make_case(ROWS["ds-v32-topk-decode-b1"], DEV, shrink=True)
    testing.opcheck_as_called(topk_op, "_topk_select", lambda: case.run(topk_select_fwd))


def test_tie_across_the_sample_threshold():
    """Long rows (sample path) where a third of the keys share the top score: the sampled threshold is that
    score, the survivors overflow the scratch, and the tie fallback must take the lowest positions; a row
    whose top level holds fewer than topk keys takes the whole-window select."""
    gen = testing.generator(8)
    levels = torch.tensor([-1.0, 0.5, 2.0])
    scores = levels[torch.randint(0, 3, (1, 2, 3000, 1), generator=gen)]
    scores[0, 1, :, 0] = torch.where(torch.arange(3000) % 50 == 0, 2.0, scores[0, 1, :, 0].clamp(max=0.5))
    case = _case(scores, [[0, 0]], [[3000, 3000]], 100)
    expected = case.fresh().run(SPEC.reference)["indexes"].cpu()
    for config in SELECTS + SPLITS:
        got = SPEC.check(case, pinned(topk_op, config))["indexes"].cpu()
        assert torch.equal(got.sort(-1).values, expected.sort(-1).values)


def _split_counters_are_zero() -> bool:
    return not bool(runtime.arrival_counters(DEV, 1).any())


def _threshold_bin_size(row: torch.Tensor, topk: int, hist_bits: int) -> int:
    """Keys of ``row`` (1-D fp32) in the split path's threshold bin (the kernel's key and bin mapping)."""
    bits = torch.where(row == 0, torch.zeros_like(row), row).view(torch.int32)
    keys = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    bins = (keys >> (32 - hist_bits)).long() + (1 << (hist_bits - 1))
    return int((bins == bins.sort(descending=True).values[topk - 1]).sum())


@pytest.mark.parametrize("config", SPLITS, ids=SPLIT_IDS)
@pytest.mark.parametrize("seed", range(3))
def test_split_path_random_rows(config, seed):
    """The split path on normal rows of several programs each: windows whole, clipped, unaligned, shorter
    than topk and empty, G = 2 strided scores; exact set equality, and the row histograms and counters back
    at zero afterwards (the next call relies on it)."""
    gen = testing.generator(60 + seed)
    s_kv, topk = 2900, (1, 150, 700)[seed]
    base = torch.randn((1, 5, 2, s_kv), generator=gen)
    case = _case(base.transpose(2, 3), [[0, 37, -9, 2000, 5]], [[2900, 2811, 1300, 2000 + topk // 2, 2]], topk)
    expected = case.fresh().run(SPEC.reference)["indexes"].cpu()
    got = SPEC.check(case, pinned(topk_op, config))["indexes"].cpu()
    assert torch.equal(got.sort(-1).values, expected.sort(-1).values)
    assert _split_counters_are_zero(), "split histograms / counters not reset"


@pytest.mark.parametrize("config", SPLITS[::2], ids=SPLIT_IDS[::2])
def test_split_ties_inside_the_threshold_bin(config):
    """Every 9th key equal to 1.0, the rest spread (0.3 · normal), topk reaching 100 keys into the tie: the
    threshold bin holds the tie (within the candidate slots) and the last program's select (or the rank launch)
    must take every key above 1.0 and the lowest tied positions; the second row (negative but for its tie) ties
    -0.0 and +0.0."""
    scores = 0.3 * torch.randn((1, 2, 2600, 1), generator=testing.generator(71))
    scores[0, 1] = -scores[0, 1].abs()
    scores[0, 0, ::9, 0] = 1.0
    scores[0, 1, ::9, 0] = torch.tensor([0.0, -0.0]).repeat(145)[: len(range(0, 2600, 9))]
    topk = int((scores[0, 0] > 1.0).sum()) + 200
    for row in scores[0, :, :, 0]:
        assert _threshold_bin_size(row, topk, config.hist_bits) <= config.cap(topk), "no overflow wanted"
    case = _case(scores, [[0, 0]], [[2600, 2600]], topk)
    expected = case.fresh().run(SPEC.reference)["indexes"].cpu()
    got = SPEC.check(case, pinned(topk_op, config))["indexes"].cpu()
    assert torch.equal(got.sort(-1).values, expected.sort(-1).values)


def test_rank_launch_slots_hold_a_wide_threshold_bin():
    """The decode row's default split config on scores in [0.5, 1): one octave, so 2048 bins (4 an octave) put ~4096
    of the 16384 keys in the threshold bin at k = 2048, twice a register select's 2048 slots; the rank launch keeps
    them all as candidates and ranks them in 1024-wide steps."""
    config = topk_op.CONFIGS["h200-split-rank-s8"]
    scores = 0.5 + 0.5 * torch.rand((1, 1, 16384, 1), generator=testing.generator(73))
    in_bin = _threshold_bin_size(scores[0, 0, :, 0], 2048, config.hist_bits)
    assert 2048 < in_bin <= config.cap(2048), in_bin
    case = _case(scores, [[0]], [[16384]], 2048)
    expected = case.fresh().run(SPEC.reference)["indexes"].cpu()
    got = SPEC.check(case, pinned(topk_op, config))["indexes"].cpu()
    assert torch.equal(got.sort(-1).values, expected.sort(-1).values)
    assert _split_counters_are_zero(), "split histograms / counters not reset"


@pytest.mark.parametrize("config", SPLITS[::2], ids=SPLIT_IDS[::2])
def test_split_candidate_overflow_selects_over_the_window(config):
    """More keys in the threshold bin than candidate slots (near-equal scores, an all-equal row): the row's
    last program (with the rank launch, its program 0) falls back to the exact whole-window select."""
    gen = testing.generator(72)
    scores = 1.0 + torch.randint(0, 1 << 20, (1, 2, 2400, 1), generator=gen) * 2.0 ** -23
    scores[0, 1] = 0.75
    topk = 50
    for row in scores[0, :, :, 0]:
        assert _threshold_bin_size(row, topk, config.hist_bits) > config.cap(topk), "overflow wanted"
    case = _case(scores, [[0, 3]], [[2400, 2400]], topk)
    expected = case.fresh().run(SPEC.reference)["indexes"].cpu()
    got = SPEC.check(case, pinned(topk_op, config))["indexes"].cpu()
    assert torch.equal(got.sort(-1).values, expected.sort(-1).values)
    assert _split_counters_are_zero()


@pytest.mark.parametrize("config", SPLITS[::2], ids=SPLIT_IDS[::2])
def test_split_rows_in_several_launch_batches(config, monkeypatch):
    """Pinned on more rows than one batch holds, the split path launches batch after batch (row offset) with
    the same result."""
    monkeypatch.setattr(topk_op, "SPLIT_ROWS", 2)
    case = _case(_scores(1, 5, 1900, seed=73), [[0, 0, 100, 0, 7]], [[1900, 1900, 1800, 60, 1900]], 90)
    SPEC.check(case, pinned(topk_op, config))
    assert _split_counters_are_zero()


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [4, 8, 49, 50])
def test_decode_batches_on_the_default_path(rows):
    """The public call on a decode batch of 16384-key rows, k = 2048 (the DSA decode row's shape, B rows): each side of
    the picks between the split path's two forms (4 / 8 rows) and between its last-program form and ``h200`` (49 /
    50 rows), windows whole but for one clipped and one shorter than k."""
    starts, ends = [0] * rows, [16384] * rows
    starts[1], ends[2] = 5000, 1500
    SPEC.check(_case(_scores(rows, 1, 16384, seed=rows), [starts], [ends], 2048))


def test_pick_config_splits_only_few_long_rows(monkeypatch):
    """On a 132-SM GPU with the split path on (``SPLIT_DEFAULT``, the default): the decode row (1 × 16384 keys) and
    up to 4 such rows (one wave of 512-key programs) take its rank-launch form, 5-49 rows (up to 12 waves) its
    last-program form, more such rows one 8-warp program a row (``h200``); rows under 4096 keys keep ``h200-latency``
    below one program per SM. Off, long rows all take ``h200``."""
    monkeypatch.setattr(runtime, "interpreting", lambda: False)
    monkeypatch.setattr(runtime, "num_sms", lambda: 132)
    pick = lambda rows, s_kv: next(n for n, c in topk_op.CONFIGS.items() if c is topk_op.pick_config(rows, s_kv))
    assert pick(1, 16384) == pick(4, 16384) == pick(1, 65536) == "h200-split-rank-s8"
    assert pick(5, 16384) == pick(49, 16384) == pick(2, 65536) == pick(12, 65536) == "h200-split"
    assert pick(50, 16384) == pick(13, 65536) == pick(32768, 65536) == pick(200, 2048) == "h200"
    assert pick(64, 2048) == pick(1, 2048) == "h200-latency"
    monkeypatch.setattr(topk_op, "SPLIT_DEFAULT", False)
    assert pick(1, 16384) == pick(16, 16384) == "h200"
