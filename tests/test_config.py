"""Launch configs and per-device tables: parse, defaults, load, validate, lookup."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ssmdecode import config as cfgmod
from ssmdecode.compat import sglang
from ssmdecode.config import (
    LaunchConfig,
    TableEntry,
    TableError,
    candidate_configs,
    clear_config_cache,
    default_config,
    load_table,
    load_table_entries,
    lookup_config,
    nearest_bucket,
    replay_fast_config,
    run_id,
    table_key,
    upstream_config,
    write_table,
)
from ssmdecode.ops.selective_state_update import decode


@pytest.fixture
def table_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty SSMDECODE_CONFIG_DIR, and lookups that see a GPU called FAKE_GPU."""
    monkeypatch.setenv("SSMDECODE_CONFIG_DIR", str(tmp_path))
    monkeypatch.setattr(cfgmod, "device_key", lambda device=None: "FAKE_GPU")
    clear_config_cache()
    yield tmp_path
    clear_config_cache()


def _write(table_dir: Path, data: object) -> Path:
    path = table_dir / "selective_state_update" / "FAKE_GPU.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def _table(entries: dict) -> dict:
    return {"kernel": "selective_state_update", "device": "Fake GPU", "entries": entries}


KEY = "headdim=64 dstate=128 state=float32"


def test_results_of_the_persistent_grid_era_still_load() -> None:
    # results JSON of c2c42dc and before carry "stages": 0 (the persistent grid, since removed)
    assert LaunchConfig.from_dict({"block_m": 8, "num_warps": 1, "stages": 0}) == LaunchConfig(8, 1)
    with pytest.raises(ValueError, match="unknown LaunchConfig field"):
        LaunchConfig.from_dict({"block_m": 8, "num_warps": 1, "stages": 3})
    with pytest.raises(ValueError, match="unknown flag"):
        LaunchConfig.parse("4,1,slot,evict,ordered,p3")


def test_parse_and_label_round_trip() -> None:
    for text in ("8,1", "(16,4,slot)", "4,2,slot,evict", " 2 , 8 "):
        cfg = LaunchConfig.parse(text)
        assert LaunchConfig.parse(cfg.label) == cfg
        assert LaunchConfig.from_dict(cfg.to_dict()) == cfg
    assert LaunchConfig.parse("16,4,evict") == LaunchConfig(16, 4, evict_first=True)
    assert LaunchConfig.parse("8,1,ordered,slot") == LaunchConfig(8, 1, slot_major=True, ordered_sum=True)
    assert LaunchConfig(8, 1, ordered_sum=True).label == "(8,1,ordered)"
    capped = LaunchConfig.parse("16,1,regs88,slot")
    assert capped == LaunchConfig(16, 1, slot_major=True, max_registers=88)
    assert capped.label == "(16,1,slot,regs88)" and not capped.upstream_grid
    assert LaunchConfig.from_dict(capped.to_dict()) == capped
    assert "max_registers" not in LaunchConfig(8, 1).to_dict()  # tables before the cap read the same
    with pytest.raises(ValueError, match="unknown flag"):
        LaunchConfig.parse("8,1,fast")
    with pytest.raises(ValueError, match="expected 'BLOCK_M,WARPS"):
        LaunchConfig.parse("8")
    with pytest.raises(ValueError, match="two register caps"):
        LaunchConfig.parse("8,1,regs64,regs72")
    for bad in ("8,1,regs60", "8,1,regs16", "8,1,regs256"):
        with pytest.raises(ValueError, match="max_registers must be None or a multiple of 8"):
            LaunchConfig.parse(bad)
    with pytest.raises(ValueError, match="max_registers"):
        LaunchConfig(8, 1, max_registers=True)


def test_upstream_and_default_configs() -> None:
    assert [upstream_config(n).label for n in (16, 32, 64, 128, 256)] == [
        "(32,4)",
        "(16,4)",
        "(8,4)",
        "(4,4)",
        "(4,8)",
    ]
    assert default_config(128, torch.float32) == LaunchConfig(8, 1)  # the seed's change
    assert default_config(96, torch.float32) == LaunchConfig(8, 1)
    assert default_config(128, torch.bfloat16) == LaunchConfig(4, 4)  # another row-sum order
    assert default_config(64, torch.float32) == upstream_config(64)
    assert default_config(256, torch.float32) == upstream_config(256)


def test_candidate_spaces() -> None:
    basic = candidate_configs(64, 128, torch.float32, "basic")
    full = candidate_configs(64, 128, torch.float32, "full")
    tune = candidate_configs(64, 128, torch.float32)
    assert len(basic) == 7 * 5  # block_m 1..64 x warps 1..16, as the seed swept
    assert set(basic) < set(full)
    for space in (basic, full, tune):
        assert len(space) == len(set(space))
    for label in ("(4,4)", "(8,1)", "(2,8)", "(64,16)"):
        assert LaunchConfig.parse(label) in basic
    for label in ("(8,2,slot,evict)", "(4,4,slot,evict,ordered)", "(16,1,slot,evict,ordered)"):
        assert LaunchConfig.parse(label) in tune
    assert all(c.slot_major and c.evict_first for c in tune)
    # (2,8) holds 1 state element per thread: no 16-byte vector, and another row-sum order
    assert not any((c.block_m, c.num_warps) == (2, 8) for c in tune)
    # no ordered sum where it is not defined
    assert not any(c.ordered_sum for c in candidate_configs(64, 8, torch.float32))
    assert max(c.block_m for c in candidate_configs(12, 24, torch.float32, "basic")) == 16
    with pytest.raises(ValueError, match="space must be"):
        candidate_configs(64, 128, torch.float32, "all")


def test_nearest_bucket() -> None:
    buckets = [1, 8, 64, 512]
    assert nearest_bucket(buckets, 1) == 1
    assert nearest_bucket(buckets, 2) == 1  # log2 2 = 1: nearer 1 (0) than 8 (3)
    assert nearest_bucket(buckets, 3) == 8  # log2 3 = 1.58: nearer 8 (3) than 1 (0)
    assert nearest_bucket(buckets, 5) == 8
    assert nearest_bucket(buckets, 100) == 64
    assert nearest_bucket(buckets, 181) == 64  # log2 181 = 7.4998: just nearer 64
    assert nearest_bucket(buckets, 4096) == 512


def test_table_key() -> None:
    assert table_key(64, 128, torch.float32) == KEY
    assert table_key(128, 64, "bfloat16") == "headdim=128 dstate=64 state=bfloat16"
    with pytest.raises(ValueError, match="state dtype 'float64'"):
        table_key(64, 128, torch.float64)
    sr = "headdim=64 dstate=128 state=float16 rounding=stochastic"
    assert table_key(64, 128, torch.float16, rounding="stochastic") == sr
    assert table_key(64, 128, "bfloat16", "buffer", 4, "stochastic") == (
        "headdim=64 dstate=128 state=bfloat16 mode=buffer tokens=4 rounding=stochastic"
    )
    with pytest.raises(ValueError, match="needs a 16-bit state"):
        table_key(64, 128, torch.float32, rounding="stochastic")
    with pytest.raises(ValueError, match="rounding 'down'"):
        table_key(64, 128, torch.float16, rounding="down")


def test_stochastic_calls_take_their_entries_then_round_to_nearests(table_dir: Path) -> None:
    f16, sr = table_key(64, 128, torch.float16), table_key(64, 128, torch.float16, rounding="stochastic")
    buf, buf_sr = (table_key(64, 128, torch.float16, "buffer", 4, r) for r in ("nearest", "stochastic"))
    nearest, stochastic = LaunchConfig(8, 1), LaunchConfig(16, 1, max_registers=112)
    _write(
        table_dir,
        _table(
            {
                f16: {"8": nearest.to_dict()},
                sr: {"256": stochastic.to_dict()},
                buf: {"8": nearest.to_dict()},
                buf_sr: {"8": stochastic.to_dict()},
            }
        ),
    )
    assert lookup_config(64, 128, torch.float16, 8) == nearest
    assert lookup_config(64, 128, torch.float16, 8, stochastic=True) == stochastic
    assert lookup_config(64, 128, torch.float16, 8, mode="buffer", tokens=4) == nearest
    assert lookup_config(64, 128, torch.float16, 8, mode="buffer", tokens=2, stochastic=True) == stochastic
    # a shape or a mode without entries of its own: round-to-nearest's, then the default
    assert lookup_config(64, 128, torch.bfloat16, 8, stochastic=True) == default_config(128, torch.bfloat16)
    assert lookup_config(64, 128, torch.float16, 8, mode="dst", tokens=4, stochastic=True) == default_config(
        128, torch.float16
    )
    _write(table_dir, _table({f16: {"8": nearest.to_dict()}}))
    clear_config_cache()
    assert lookup_config(64, 128, torch.float16, 8, stochastic=True) == nearest
    # float32 stores never round stochastically: the table's key of float32
    _write(table_dir, _table({KEY: {"8": nearest.to_dict()}}))
    clear_config_cache()
    assert lookup_config(64, 128, torch.float32, 8, stochastic=True) == nearest


def test_dense_verify_calls_take_their_entries_then_the_tied_ones(table_dir: Path) -> None:
    """A verify call whose dt, A or dt_bias is not tied over the head dim takes the entries
    keyed params=dense, else the tied ones; single-token calls and replay have no such key."""
    tied, dense = (table_key(64, 128, torch.float32, "buffer", 8, params=p) for p in ("tied", "dense"))
    assert dense == "headdim=64 dstate=128 state=float32 mode=buffer tokens=8 params=dense"
    assert tied == "headdim=64 dstate=128 state=float32 mode=buffer tokens=8"
    for mode in ("single", "replay"):
        with pytest.raises(ValueError, match="params 'dense'"):
            table_key(64, 128, torch.float32, mode, 0 if mode == "single" else 4, params="dense")
    with pytest.raises(ValueError, match="params 'packed'"):
        table_key(64, 128, torch.float32, "buffer", 4, params="packed")
    one_warp, four_rows = LaunchConfig(16, 1, True, True, True), LaunchConfig(4, 1, True, True)
    _write(table_dir, _table({tied: {"64": one_warp.to_dict()}, dense: {"64": four_rows.to_dict()}}))
    assert lookup_config(64, 128, torch.float32, 64, mode="buffer", tokens=8) == one_warp
    assert lookup_config(64, 128, torch.float32, 64, mode="buffer", tokens=8, dense=True) == four_rows
    # a mode without dense entries: the tied ones
    _write(table_dir, _table({tied: {"64": one_warp.to_dict()}}))
    clear_config_cache()
    assert lookup_config(64, 128, torch.float32, 64, mode="buffer", tokens=8, dense=True) == one_warp
    # a replay key with params is refused when the table loads
    bad = "headdim=64 dstate=128 state=float32 mode=replay tokens=4 params=dense"
    _write(table_dir, _table({bad: {"64": one_warp.to_dict()}}))
    clear_config_cache()
    with pytest.raises(TableError, match="params=dense"):
        lookup_config(64, 128, torch.float32, 64, mode="replay", tokens=4)


def test_fast_replay_entries_serve_their_own_token_count_only(table_dir: Path) -> None:
    # a table tuned at T = 3 and 8 only (mode replay-fast): T = 3 and 8 take their entries, every
    # other count (decode's T = 1, T = 2, 4: other kernels or paths) replay_fast_config
    t3, t8 = (table_key(64, 128, torch.float32, "replay-fast", t) for t in (3, 8))
    eight_warps, wide = LaunchConfig(32, 8, True, True), LaunchConfig(64, 1, True, True)
    _write(table_dir, _table({t3: {"8": eight_warps.to_dict()}, t8: {"8": wide.to_dict()}}))
    fast = {"mode": "replay-fast"}
    assert lookup_config(64, 128, torch.float32, 8, **fast, tokens=3) == eight_warps
    assert lookup_config(64, 128, torch.float32, 64, **fast, tokens=3) == eight_warps  # the nearest bucket
    assert lookup_config(64, 128, torch.float32, 8, **fast, tokens=8) == wide
    for tokens in (1, 2, 4, 16):
        want = replay_fast_config(64, 128, 8, tokens)
        assert lookup_config(64, 128, torch.float32, 8, **fast, tokens=tokens) == want
        assert want not in (eight_warps, wide)
    # the other multi-token modes keep the nearest token count
    buf1 = table_key(64, 128, torch.float32, "buffer", 1)
    _write(table_dir, _table({buf1: {"8": eight_warps.to_dict()}}))
    clear_config_cache()
    assert lookup_config(64, 128, torch.float32, 8, mode="buffer", tokens=4) == eight_warps


def test_lookup_uses_table_then_default(table_dir: Path) -> None:
    _write(
        table_dir,
        _table(
            {
                KEY: {
                    "8": {"block_m": 8, "num_warps": 2},
                    "512": {"block_m": 16, "num_warps": 1, "slot_major": True},
                }
            }
        ),
    )
    assert lookup_config(64, 128, torch.float32, 4) == LaunchConfig(8, 2)
    assert lookup_config(64, 128, torch.float32, 1000) == LaunchConfig(16, 1, slot_major=True)
    # a shape the table does not hold: the built-in default
    assert lookup_config(64, 64, torch.float32, 8) == default_config(64)
    assert lookup_config(64, 128, torch.bfloat16, 8) == default_config(128, torch.bfloat16)


def test_unknown_device_gets_default(table_dir: Path) -> None:
    assert load_table("FAKE_GPU") is None
    assert lookup_config(64, 128, torch.float32, 512) == default_config(128)


def test_default_follows_a_narrower_tile(table_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a table entry, a call that reads a state tile in a 16-bit dtype (an EAGLE tree's
    parents from a bf16 intermediate buffer) takes default_config of that dtype, upstream's
    config at dstate 128 (the 2-byte tile's row-sum order); a float32 buffer keeps (8,1). The
    sglang adapter passes the buffer's dtype for a tree call, and only then."""
    buffer = dict(mode="buffer", tokens=4)
    assert lookup_config(64, 128, torch.float32, 7, **buffer) == LaunchConfig(8, 1)
    assert lookup_config(64, 128, torch.float32, 7, **buffer, tile_dtype=torch.float32) == LaunchConfig(8, 1)
    narrow = lookup_config(64, 128, torch.float32, 7, **buffer, tile_dtype=torch.bfloat16)
    assert narrow == upstream_config(128)

    seen = []

    def spy(*args, **kwargs):
        seen.append((kwargs.get("tile_dtype"), lookup_config(*args, **kwargs)))
        return seen[-1][1]

    monkeypatch.setattr(decode, "lookup_config", spy)
    g = torch.Generator().manual_seed(0)
    B, T, H, P, N = 2, 3, 2, 8, 16
    state = torch.randn(3, H, P, N, generator=g)
    x = torch.randn(B, T, H, P, generator=g).bfloat16()
    dt = torch.rand(B, T, H, P, generator=g).bfloat16()
    A = -torch.rand(H, P, N, generator=g)
    BC = torch.randn(B, T, 1, N, generator=g).bfloat16()
    src = torch.tensor([2, 0], dtype=torch.int32)
    parents = torch.tensor([[-1, 0, 0], [-1, 0, 1]], dtype=torch.int32)
    for dtype, tree, want in ((torch.bfloat16, True, upstream_config(N)), (torch.bfloat16, False, None)):
        buf = torch.zeros(2, T, H, P, N, dtype=dtype)
        sglang.selective_state_update(
            state, x, dt, A, BC, BC, None, None, None, True, src, out=torch.empty_like(x),
            disable_state_update=True, intermediate_states_buffer=buf, cache_steps=T,
            retrieve_parent_token=parents if tree else None,
            intermediate_state_indices=torch.tensor([1, 0], dtype=torch.int32),
        )  # fmt: skip
        tile, config = seen[-1]
        assert tile == (dtype if tree else None)
        assert want is None or config == want


def test_cpu_has_no_table() -> None:
    assert cfgmod.device_key("cpu") == "cpu"
    assert lookup_config(64, 128, torch.float32, 8, "cpu") == default_config(128)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("{not json", "not valid JSON"),
        ([], "field '<root>': expected a JSON object"),
        ({"kernel": "other", "entries": {}}, "field 'kernel'"),
        (_table({}), "field 'entries'"),
        (_table({"hd=64": {"8": {"block_m": 8, "num_warps": 1}}}), "field 'entries.hd=64'"),
        (_table({KEY: {"eight": {"block_m": 8, "num_warps": 1}}}), f"field 'entries.{KEY}.eight'"),
        (_table({KEY: {"8": {"block_m": 6, "num_warps": 1}}}), "block_m must be a power of two"),
        (_table({KEY: {"8": {"block_m": 8, "num_warps": 1, "prefetch": 2}}}), "unknown LaunchConfig field"),
        (_table({KEY: {"8": {"block_m": 8, "num_warps": 1, "stages": 2}}}), "unknown LaunchConfig field"),
        (_table({KEY: {"8": [8, 1]}}), "expected a config object"),
        (_table({f"{KEY} rounding=stochastic": {"8": {"block_m": 8, "num_warps": 1}}}), "a 16-bit DTYPE"),
    ],
)
def test_malformed_table_names_file_and_field(table_dir: Path, data: object, message: str) -> None:
    path = _write(table_dir, data)
    with pytest.raises(TableError, match=message) as info:
        lookup_config(64, 128, torch.float32, 8)
    assert str(path) in str(info.value)


def test_write_table_round_trip_is_sorted_and_reviewable(table_dir: Path) -> None:
    entries = {
        KEY: {
            512: LaunchConfig(16, 1, True),
            8: LaunchConfig(8, 2),
            1024: LaunchConfig(16, 1, True, max_registers=88),
        },
        "headdim=64 dstate=64 state=float32": {1: LaunchConfig(16, 1)},
    }
    path = write_table("FAKE_GPU", entries, {"device": "Fake GPU", "date": "2026-11-29"})
    text = path.read_text()
    assert text.endswith("}\n")
    data = json.loads(text)
    assert list(data["entries"]) == sorted(entries)
    assert list(data["entries"][KEY]) == ["8", "512", "1024"]
    assert "max_registers" not in data["entries"][KEY]["8"]
    assert data["entries"][KEY]["1024"]["max_registers"] == 88
    assert load_table("FAKE_GPU") == {k: dict(v) for k, v in entries.items()}
    assert lookup_config(64, 128, torch.float32, 600) == LaunchConfig(16, 1, True)


def test_shipped_tables_are_valid() -> None:
    folder = cfgmod.PACKAGE_CONFIG_DIR / "selective_state_update"
    for path in sorted(folder.glob("*.json")):
        table = load_table(path.stem, cfgmod.PACKAGE_CONFIG_DIR)
        assert table, f"{path} holds no entries"


def test_table_keeps_each_tune_run_once_and_entries_name_it(tmp_path: Path) -> None:
    """write_table stores a tune run's record once, under "runs", and each entry names it by
    id; loading gives every entry its record back. An inline record (older tables) still
    loads, and an id that names no run is refused."""
    first = {"command": "ssmdecode tune --batch 1", "date": "2026-12-01T21:45:14+00:00", "git_commit": "abc"}
    second = {"command": "ssmdecode tune --batch 8", "date": "2026-12-01T22:00:00+00:00", "git_commit": None}
    entries = {
        "headdim=64 dstate=128 state=float32": {
            1: TableEntry(LaunchConfig(8, 1), first),
            8: TableEntry(LaunchConfig(4, 1), first),
            64: TableEntry(LaunchConfig(4, 4), second),
            512: TableEntry(LaunchConfig(16, 4)),
        }
    }
    path = write_table("TEST_DEV", entries, {"made_by": "test"}, tmp_path)
    data = json.loads(path.read_text())
    assert sorted(data["runs"].values(), key=lambda r: r["command"]) == [first, second]
    bucket = data["entries"]["headdim=64 dstate=128 state=float32"]
    assert bucket["1"]["tuned_by"] == bucket["8"]["tuned_by"] == run_id(first)
    assert "tuned_by" not in bucket["512"]
    loaded = load_table_entries("TEST_DEV", tmp_path)["headdim=64 dstate=128 state=float32"]
    assert [loaded[b].tuned_by for b in (1, 8, 64, 512)] == [first, first, second, None]
    bucket["1"]["tuned_by"] = dict(first)  # the inline form of older tables
    path.write_text(json.dumps(data))
    clear_config_cache()
    assert (
        load_table_entries("TEST_DEV", tmp_path)["headdim=64 dstate=128 state=float32"][1].tuned_by == first
    )
    bucket["1"]["tuned_by"] = "2026-12-01T00:00-00000000"
    path.write_text(json.dumps(data))
    clear_config_cache()
    with pytest.raises(TableError, match="names no run"):
        load_table_entries("TEST_DEV", tmp_path)
