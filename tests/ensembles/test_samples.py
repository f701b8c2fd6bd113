"""Comparing replayed outputs with expected ones, and the exact encoding samples travel in."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conch import BuildError, DeclarationError, DType, Tolerance
from conch.builder.build import build_ensemble
from conch.ensembles.samples import compare, decode_array, encode_array


def test_elementwise_by_default() -> None:
    want = np.ones((2, 3), np.float32)
    assert compare("o", want + 1e-6, want, Tolerance()).passed
    result = compare("o", want + 1e-3, want, Tolerance())
    assert not result.passed and "max abs err 0.001" in result.detail


def test_cosine_per_row() -> None:
    want = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    assert compare("o", want * 3, want, Tolerance(cosine=0.999)).passed  # scale does not matter
    result = compare("o", np.array([[1.0, 0.0], [1.0, 1.0]], np.float32), want, Tolerance(cosine=0.999))
    assert not result.passed and "min cosine 0.7071068" in result.detail


def test_argmax_alone_and_with_atol() -> None:
    want = np.array([[0.1, 0.9], [0.8, 0.2]], np.float32)
    close_class = np.array([[0.3, 0.7], [0.6, 0.4]], np.float32)
    assert compare("o", close_class, want, Tolerance(argmax=True)).passed
    assert not compare("o", close_class, want, Tolerance(argmax=True, atol=1e-3)).passed
    assert not compare("o", want[:, ::-1], want, Tolerance(argmax=True)).passed
    assert Tolerance(argmax=True, atol=1e-3).describe() == "argmax equal, atol=0.001 rtol=1e-05"


def test_bytes_exact_and_the_first_difference_is_named() -> None:
    want = np.array([[b"a"], [b"b"]], dtype=object)
    assert compare("o", want.copy(), want, Tolerance()).passed
    result = compare("o", np.array([[b"a"], [b"c"]], dtype=object), want, Tolerance())
    assert not result.passed and "element [1, 0]: got b'c', expected b'b'" in result.detail


def test_shape_mismatch() -> None:
    assert "shape [3] != expected [2]" in compare("o", np.zeros(3), np.zeros(2), Tolerance()).detail


@pytest.mark.parametrize("dtype", [d for d in DType if d is not DType.BYTES])
def test_numeric_encoding_round_trips_exactly(dtype: DType) -> None:
    rng = np.random.default_rng(0)
    arr = (rng.random((2, 3)) * 100).astype(dtype.numpy)
    back = decode_array(encode_array(arr, dtype))
    assert back.dtype == dtype.numpy and np.array_equal(back, arr)


def test_bytes_encoding_round_trips_binary_and_unicode() -> None:
    arr = np.array([[b"\x00\xff"], ["ünï".encode()]], dtype=object)
    back = decode_array(encode_array(arr, DType.BYTES))
    assert back.shape == (2, 1) and list(back.ravel()) == list(arr.ravel())


def test_tolerance_json_round_trip() -> None:
    for tol in (Tolerance(), Tolerance(cosine=0.99), Tolerance(argmax=True, atol=1e-3)):
        assert Tolerance.from_json(tol.to_json()) == tol


def test_a_sample_without_expected_outputs_is_refused_where_it_is_declared() -> None:
    from conftest import linear_ensemble

    ens = linear_ensemble()
    with pytest.raises(DeclarationError, match=r"sample 'empty': no expected outputs, so its replay would pass "
                                               r"whatever the ensemble answers"):
        ens.sample("empty", {"X": np.zeros((1, 4), np.float32)}, {})
    assert [s.name for s in ens.samples] == ["two rows"]


def test_expected_outputs_computed_as_nothing_fail_the_build(tmp_path: Path) -> None:
    from conftest import linear_ensemble

    ens = linear_ensemble()
    ens.sample("lazy", {"X": np.zeros((1, 4), np.float32)}, dict)
    with pytest.raises(DeclarationError, match=r"ensemble 'linear'.*sample 'lazy': no expected outputs"):
        build_ensemble(ens, tmp_path)
    assert not list(tmp_path.iterdir())
    not_a_mapping = linear_ensemble()
    not_a_mapping.sample("list", {"X": np.zeros((1, 4), np.float32)}, lambda: [1.0])  # type: ignore[arg-type,return-value]
    with pytest.raises(DeclarationError, match=r"sample 'list': expected outputs must be a mapping name -> array"):
        build_ensemble(not_a_mapping, tmp_path)


def test_samples_naming_unknown_outputs_are_refused(tmp_path: Path) -> None:
    from conftest import linear_ensemble

    declared = linear_ensemble()
    declared.sample("typo", {"X": np.zeros((1, 4), np.float32)}, {"z": np.ones((1, 4), np.float32)})
    with pytest.raises(DeclarationError, match=r"ensemble 'linear'.*sample 'typo' expects unknown outputs \['z'\]"):
        build_ensemble(declared, tmp_path)
    computed = linear_ensemble()
    computed.sample("typo", {"X": np.zeros((1, 4), np.float32)}, lambda: {"z": np.ones((1, 4), np.float32)})
    with pytest.raises(BuildError, match=r"sample 'typo': expects outputs \['z'\], but the ensemble outputs \['Z'\]"):
        build_ensemble(computed, tmp_path)
    assert not list(tmp_path.iterdir())
