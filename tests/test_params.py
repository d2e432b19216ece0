"""Canonical parameter table, initialisation and the .npz file (docs/spec.md §4)."""

from __future__ import annotations

import importlib
import json
import re

import numpy as np
import pytest

from shared.params import (ModelConfig, ParamError, check_params, init_params, load_params, param_shapes,
                           save_params)

CONFIG = ModelConfig(vocab_size=11, embed_dim=4, hidden_dim=3, tracker_dim=2, mlp_dim=5, mlp_layers=2)
VOCAB = ["<pad>", "<unk>"] + [f"w{i}" for i in range(9)]


def test_shape_table_full_model():
    shapes = param_shapes(ModelConfig(vocab_size=100))
    assert shapes == {
        "embed.embedding": (100, 300),
        "projection.kernel": (300, 600), "projection.bias": (600,),
        "tracker.kernel_input": (900, 256), "tracker.kernel_hidden": (64, 256), "tracker.bias": (256,),
        "reduce.left.kernel": (300, 1500), "reduce.left.bias": (1500,),
        "reduce.right.kernel": (300, 1500), "reduce.track.kernel": (64, 1500),
        "mlp.0.kernel": (1200, 1024), "mlp.0.bias": (1024,),
        "mlp.1.kernel": (1024, 1024), "mlp.1.bias": (1024,),
        "output.kernel": (1024, 3), "output.bias": (3,),
    }


def test_shape_table_without_tracker_or_mlp():
    shapes = param_shapes(CONFIG.replace(tracker_dim=0, mlp_layers=0))
    assert not any(name.startswith("tracker.") for name in shapes)
    assert "reduce.track.kernel" not in shapes
    assert not any(name.startswith("mlp.") for name in shapes)
    assert shapes["output.kernel"] == (4 * 3, 3)


def test_config_rejects_bad_sizes():
    with pytest.raises(ParamError, match="hidden_dim"):
        ModelConfig(vocab_size=5, hidden_dim=0)
    with pytest.raises(ParamError, match="tracker_dim"):
        ModelConfig(vocab_size=5, tracker_dim=-1)


def test_init_is_seeded_and_dtype_independent():
    a = init_params(CONFIG, seed=1)
    b = init_params(CONFIG, seed=1)
    c = init_params(CONFIG, seed=2)
    d = init_params(CONFIG, seed=1, dtype=np.float64)
    check_params(a, CONFIG)
    for name in a:
        assert a[name].dtype == np.float32 and d[name].dtype == np.float64
        assert np.array_equal(a[name], b[name])
        assert np.array_equal(a[name], d[name].astype(np.float32))
    assert not np.array_equal(a["reduce.left.kernel"], c["reduce.left.kernel"])
    # forget-gate biases start at 1 (tracker gates i,f,g,o; reduce gates a,i,f1,f2,o)
    assert np.all(a["tracker.bias"][2:4] == 1) and np.all(a["tracker.bias"][:2] == 0)
    assert np.all(a["reduce.left.bias"][6:12] == 1) and np.all(a["reduce.left.bias"][:6] == 0)


def test_save_load_round_trip_is_bit_identical(tmp_path):
    params = init_params(CONFIG, seed=3)
    path = tmp_path / "model.npz"
    save_params(path, params, CONFIG, VOCAB)
    loaded = load_params(path)
    assert loaded.config == CONFIG
    assert list(loaded.vocab) == VOCAB
    assert set(loaded.params) == set(params)
    for name, value in params.items():
        assert loaded.params[name].dtype == value.dtype
        assert np.array_equal(loaded.params[name], value)
    # saving what was loaded gives the same arrays again
    save_params(tmp_path / "again.npz", loaded.params, loaded.config, loaded.vocab)
    with np.load(path) as first, np.load(tmp_path / "again.npz") as second:
        assert sorted(first.files) == sorted(second.files)
        for name in first.files:
            assert np.array_equal(first[name], second[name]), name
    meta = json.loads(str(np.load(path)["meta.config"]))
    assert meta["lowercase"] is True and meta["hidden_dim"] == 3


def _write_raw(path, arrays):
    np.savez(path, **arrays)
    return path


def _raw_arrays():
    arrays = dict(init_params(CONFIG, seed=0))
    arrays["meta.config"] = np.array(CONFIG.to_json())
    arrays["meta.vocab"] = np.array(VOCAB)
    return arrays


def test_missing_entry_is_named(tmp_path):
    arrays = _raw_arrays()
    del arrays["reduce.right.kernel"]
    with pytest.raises(ParamError, match=r"missing parameter 'reduce.right.kernel' \(expected shape \(3, 15\)\)"):
        load_params(_write_raw(tmp_path / "m.npz", arrays))


def test_extra_entry_is_named(tmp_path):
    arrays = _raw_arrays()
    arrays["mlp.7.kernel"] = np.zeros((2, 2), np.float32)
    with pytest.raises(ParamError, match=r"unexpected parameter 'mlp.7.kernel' with shape \(2, 2\)"):
        load_params(_write_raw(tmp_path / "m.npz", arrays))


def test_misshaped_entry_names_expected_and_found(tmp_path):
    arrays = _raw_arrays()
    arrays["projection.kernel"] = np.zeros((6, 4), np.float32)
    with pytest.raises(ParamError, match=r"'projection.kernel' has shape \(6, 4\), expected \(4, 6\)"):
        load_params(_write_raw(tmp_path / "m.npz", arrays))


@pytest.mark.parametrize("meta", ["meta.config", "meta.vocab"])
def test_missing_meta_is_named(tmp_path, meta):
    arrays = _raw_arrays()
    del arrays[meta]
    with pytest.raises(ParamError, match=meta):
        load_params(_write_raw(tmp_path / "m.npz", arrays))


def test_vocab_size_must_match(tmp_path):
    arrays = _raw_arrays()
    arrays["meta.vocab"] = np.array(VOCAB[:-1])
    with pytest.raises(ParamError, match="meta.vocab"):
        load_params(_write_raw(tmp_path / "m.npz", arrays))


def test_pickled_entries_are_refused(tmp_path):
    arrays = _raw_arrays()
    arrays["meta.vocab"] = np.array(VOCAB, dtype=object)
    with pytest.raises(ParamError, match="pickle"):
        load_params(_write_raw(tmp_path / "m.npz", arrays))


def test_missing_file_is_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.npz"):
        load_params(tmp_path / "nope.npz")


def test_failed_save_leaves_the_old_file_intact(tmp_path):
    path = tmp_path / "model.npz"
    good = init_params(CONFIG, seed=0)
    save_params(path, good, CONFIG, VOCAB)
    before = path.read_bytes()
    bad = dict(good)
    bad["output.bias"] = np.zeros(4, np.float32)
    with pytest.raises(ParamError, match="output.bias"):
        save_params(path, bad, CONFIG, VOCAB)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.npz"]


# --------------------------------------------------------------------------
# The transition head (docs/spec.md §7)
# --------------------------------------------------------------------------

HEAD_CONFIG = CONFIG.replace(transition_head=True)


def test_head_entries_exactly_when_configured():
    with_head = param_shapes(HEAD_CONFIG)
    without = param_shapes(CONFIG)
    assert set(with_head) - set(without) == {"tracker.transition.kernel", "tracker.transition.bias"}
    assert with_head["tracker.transition.kernel"] == (2, 2)  # [D, 2]
    assert with_head["tracker.transition.bias"] == (2,)
    assert not any("transition" in name for name in without)


def test_head_needs_the_tracker():
    with pytest.raises(ParamError, match="transition_head needs the tracker"):
        CONFIG.replace(tracker_dim=0, transition_head=True)


def test_head_init_leaves_the_other_weights_as_without_head():
    with_head = init_params(HEAD_CONFIG, seed=4)
    without = init_params(CONFIG, seed=4)
    check_params(with_head, HEAD_CONFIG)
    for name, value in without.items():
        assert np.array_equal(with_head[name], value), name
    kernel = with_head["tracker.transition.kernel"]
    assert np.all(np.abs(kernel) <= 1 / np.sqrt(2)) and np.any(kernel != 0)
    assert np.all(with_head["tracker.transition.bias"] == 0)


def test_head_saved_and_loaded(tmp_path):
    params = init_params(HEAD_CONFIG, seed=5)
    params["tracker.transition.bias"] = np.array([0.25, -0.5], np.float32)
    path = tmp_path / "head.npz"
    save_params(path, params, HEAD_CONFIG, VOCAB)
    loaded = load_params(path)
    assert loaded.config.transition_head is True
    assert json.loads(str(np.load(path)["meta.config"]))["transition_head"] is True
    for name, value in params.items():
        assert np.array_equal(loaded.params[name], value), name


def test_file_without_the_key_loads_as_no_head(tmp_path):
    arrays = _raw_arrays()
    meta = json.loads(CONFIG.to_json())
    del meta["transition_head"]  # a file written before the head existed
    arrays["meta.config"] = np.array(json.dumps(meta))
    loaded = load_params(_write_raw(tmp_path / "old.npz", arrays))
    assert loaded.config.transition_head is False
    assert loaded.config == CONFIG


def test_head_flag_without_head_entries_names_the_missing_entry(tmp_path):
    arrays = _raw_arrays()
    arrays["meta.config"] = np.array(HEAD_CONFIG.to_json())
    with pytest.raises(ParamError, match=r"missing parameter 'tracker.transition.kernel' \(expected shape \(2, 2\)\)"):
        load_params(_write_raw(tmp_path / "m.npz", arrays))


def test_head_entries_without_the_flag_are_unexpected(tmp_path):
    arrays = _raw_arrays()
    arrays["tracker.transition.kernel"] = np.zeros((2, 2), np.float32)
    arrays["tracker.transition.bias"] = np.zeros(2, np.float32)
    with pytest.raises(ParamError, match="unexpected parameter 'tracker.transition.kernel'"):
        load_params(_write_raw(tmp_path / "m.npz", arrays))


# --------------------------------------------------------------------------
# Values and meta.config that the shapes alone do not catch (issue #17)
# --------------------------------------------------------------------------

def _nan_and_inf(nan, inf):
    """reduce.left.kernel [3, 15] with ``nan`` NaNs and ``inf`` infinities (+inf, -inf, ...)."""
    value = init_params(CONFIG, seed=0)["reduce.left.kernel"].copy()
    value.flat[:nan] = np.nan
    value.flat[nan:nan + inf] = np.resize([np.inf, -np.inf], inf)
    return value


NONFINITE = {
    "nan": (3, 0, r"3 NaN value\(s\) out of 45"),
    "inf": (0, 2, r"2 infinite value\(s\) out of 45"),
    "both": (1, 2, r"1 NaN and 2 infinite value\(s\) out of 45"),
}


@pytest.mark.parametrize("nan, inf, message", NONFINITE.values(), ids=NONFINITE.keys())
def test_nonfinite_values_are_refused_in_file_and_memory(tmp_path, nan, inf, message):
    arrays = _raw_arrays()
    arrays["reduce.left.kernel"] = _nan_and_inf(nan, inf)
    path = _write_raw(tmp_path / "m.npz", arrays)
    with pytest.raises(ParamError, match=rf"m\.npz: parameter 'reduce.left.kernel' has {message}"):
        load_params(path)
    params = {name: value for name, value in arrays.items() if not name.startswith("meta.")}
    with pytest.raises(ParamError, match=rf"^parameter 'reduce.left.kernel' has {message}"):
        check_params(params, CONFIG)
    with pytest.raises(ParamError, match="reduce.left.kernel"):
        save_params(tmp_path / "out.npz", params, CONFIG, VOCAB)
    assert not (tmp_path / "out.npz").exists()
    check_params(params, CONFIG, allow_nonfinite=True)  # gradients may be non-finite


NOT_FLOAT = {
    "int64": np.int64,
    "int32": np.int32,
    "bool": np.bool_,
    "complex": np.complex64,
    "str": np.str_,
}


@pytest.mark.parametrize("dtype", NOT_FLOAT.values(), ids=NOT_FLOAT.keys())
def test_non_float_arrays_are_refused(tmp_path, dtype):
    arrays = _raw_arrays()
    arrays["projection.kernel"] = np.ones((4, 6), dtype)
    found = np.dtype(dtype) if dtype is not np.str_ else np.dtype("<U1")
    message = rf"parameter 'projection.kernel' has dtype {found}, expected a floating-point array"
    with pytest.raises(ParamError, match=rf"m\.npz: {message}"):
        load_params(_write_raw(tmp_path / "m.npz", arrays))
    params = {name: value for name, value in arrays.items() if not name.startswith("meta.")}
    with pytest.raises(ParamError, match=rf"^{message}"):
        check_params(params, CONFIG)


def test_float16_and_float64_are_accepted():
    for dtype in (np.float16, np.float64):
        check_params(init_params(CONFIG, seed=0, dtype=dtype), CONFIG)


def _config_entry(text):
    arrays = _raw_arrays()
    arrays["meta.config"] = np.array(text)
    return arrays


_DROP = object()  # a key left out of the meta.config written by _config_with


def _config_with(**changes):
    meta = json.loads(CONFIG.to_json()) | changes
    return json.dumps({k: v for k, v in meta.items() if v is not _DROP})

BAD_CONFIG = {
    "not_json": ('{hidden_dim: 3}', r"meta.config is not valid JSON \(Expecting property name.*\): '\{hidden_dim: 3\}'"),
    "truncated": (CONFIG.to_json()[:20], r"meta.config is not valid JSON"),
    "huge_int": ('{"vocab_size": ' + "9" * 5000 + "}", r"meta.config is not valid JSON"),
    "not_object": ("[11, 4, 3]", r"meta.config must be a JSON object, got list"),
    "missing_key": (_config_with(hidden_dim=_DROP), r"meta.config lacks 'hidden_dim'"),
    "missing_keys": (_config_with(lowercase=_DROP, vocab_size=_DROP), r"meta.config lacks 'vocab_size', 'lowercase'"),
    "unknown_key": (_config_with(hiden_dim=3), r"meta.config has unknown key\(s\) 'hiden_dim'; known keys are vocab_size"),
    "string_size": (_config_with(hidden_dim="3"), r"meta.config: hidden_dim must be an integer, got '3'"),
    "float_size": (_config_with(mlp_dim=5.0), r"meta.config: mlp_dim must be an integer, got 5.0"),
    "bool_size": (_config_with(tracker_dim=True), r"meta.config: tracker_dim must be an integer, got True"),
    "null_size": (_config_with(embed_dim=None), r"meta.config: embed_dim must be an integer, got None"),
    "string_flag": (_config_with(lowercase="yes"), r"meta.config: lowercase must be true or false, got 'yes'"),
    "int_flag": (_config_with(transition_head=1), r"meta.config: transition_head must be true or false, got 1"),
    "bad_size": (_config_with(hidden_dim=0), r"meta.config: hidden_dim must be >= 1, got 0"),
}


@pytest.mark.parametrize("text, message", BAD_CONFIG.values(), ids=BAD_CONFIG.keys())
def test_bad_meta_config_names_file_entry_and_problem(tmp_path, text, message):
    path = _write_raw(tmp_path / "m.npz", _config_entry(text))
    with pytest.raises(ParamError, match=message) as info:
        load_params(path)
    assert str(info.value).startswith(f"{path}: meta.config")
    with pytest.raises(ParamError, match=message):
        ModelConfig.from_json(text)


@pytest.mark.parametrize("entry", [np.array([CONFIG.to_json()]), np.array(CONFIG.to_json().encode()),
                                   np.array(3)], ids=["1d", "bytes", "number"])
def test_meta_config_must_be_a_0d_string(tmp_path, entry):
    arrays = _raw_arrays()
    arrays["meta.config"] = entry
    with pytest.raises(ParamError, match=rf"m\.npz: meta.config must be a 0-d unicode array holding JSON, "
                                         rf"got dtype {entry.dtype} with shape {re.escape(str(entry.shape))}"):
        load_params(_write_raw(tmp_path / "m.npz", arrays))


def test_long_meta_config_is_shortened_in_the_message():
    with pytest.raises(ParamError) as info:
        ModelConfig.from_json("[" + "1, " * 1000 + "]")
    assert len(str(info.value)) < 400 and str(info.value).endswith("...'")


def test_config_types_are_checked_in_memory_too():
    with pytest.raises(ParamError, match=r"^config: vocab_size must be an integer, got '11'"):
        ModelConfig(vocab_size="11")
    with pytest.raises(ParamError, match=r"^config: lowercase must be true or false, got 1"):
        ModelConfig(vocab_size=11, lowercase=1)
    assert ModelConfig(vocab_size=np.int64(11)).vocab_size == 11  # NumPy integers are integers


FRAMEWORKS = ["pytorch", "tensorflow", "jax"]


@pytest.mark.parametrize("framework", FRAMEWORKS, ids=FRAMEWORKS)
def test_every_runner_refuses_bad_weights_in_memory(framework):
    """A dict handed to a runner (docs/runner-interface.md) goes through
    check_params, so bad values never reach a model."""
    runner = importlib.import_module(f"impl_{framework}.runner").Runner
    params = init_params(CONFIG, seed=0)
    params["output.bias"] = np.array([0.0, np.nan, 0.0], np.float32)
    with pytest.raises(ParamError, match=r"'output.bias' has 1 NaN value\(s\) out of 3"):
        runner(params, CONFIG)
    params = init_params(CONFIG, seed=0)
    params["embed.embedding"] = np.ones((11, 4), np.int64)
    with pytest.raises(ParamError, match=r"'embed.embedding' has dtype int64, expected a floating-point array"):
        runner(params, CONFIG)
