"""Comparing replayed outputs with expected ones, and the exact encoding samples travel in."""

from __future__ import annotations

from pathlib import Path

import basic_steps
import numpy as np
import pytest

from conch import BuildError, DeclarationError, DType, Ensemble, Exact, PythonStep, Tensor, Tolerance, TopK
from conch.builder.repository_build import build_ensemble
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


# -- per-output checks: TopK, Exact, a mapping output -> check ---------------------------------------------


def test_top_k_passes_when_the_ranking_holds_whatever_the_raw_scores() -> None:
    want = np.array([[0.1, 0.5, 0.3, 0.9, 0.2, 0.05]], np.float32)
    rescaled = want * 0.5  # every score off by up to 0.45, far beyond any element-wise tolerance
    assert not compare("p", rescaled, want, Tolerance(atol=1e-3)).passed
    result = compare("p", rescaled, want, TopK(k=3))
    assert result.passed and result.detail == "top-1 equal, top-3 set equal, max abs err 0.45"


def test_top_k_fails_on_another_top_class_or_another_set() -> None:
    want = np.array([[0.1, 0.5, 0.3, 0.9, 0.2, 0.05]], np.float32)
    swapped_top = np.array([[0.1, 0.95, 0.3, 0.9, 0.2, 0.05]], np.float32)  # same top-3 set, top-1 differs
    assert compare("p", swapped_top, want, TopK(k=3)).detail.startswith("top-1 differs, top-3 set equal")
    other_set = np.array([[0.1, 0.5, 0.3, 0.9, 0.4, 0.05]], np.float32)  # class 4 enters the top 3
    result = compare("p", other_set, want, TopK(k=3))
    assert not result.passed and result.detail.startswith("top-1 equal, top-3 set differs")


def test_exact_on_numbers_and_bytes_and_describe() -> None:
    ids = np.array([[3, 1]], np.int64)
    assert compare("ids", ids.copy(), ids, Exact()).passed
    assert compare("ids", ids + 1, ids, Exact()).detail == "differs, max abs err 1"
    assert (Exact().describe(), TopK(5).describe()) == ("exact", "top-1 equal, top-5 set equal")


def test_checks_round_trip_through_json() -> None:
    from conch.ensembles.samples import check_from_json, check_to_json

    for check in (Tolerance(), Tolerance(cosine=0.99), Tolerance(argmax=True, atol=1e-3), TopK(k=2), Exact()):
        assert check_from_json(check_to_json(check)) == check


def _classifier(name: str = "clf") -> Ensemble:
    ens = Ensemble(name, max_batch_size=4)
    scores = PythonStep("score", basic_steps.double, inputs=[Tensor("x", "FP32", [6])],
                        outputs=[Tensor("y", "FP32", [6])],
                        max_batch_size=4)
    upper = PythonStep("upper", basic_steps.upper, inputs=[Tensor("TEXT", "BYTES", [1])],
                       outputs=[Tensor("UPPER", "BYTES", [1])],
                       max_batch_size=4)
    ens.output("PROBS", scores(ens.input("X", "FP32", [6])))
    ens.output("LABEL", upper(ens.input("TEXT", "BYTES", [1])))
    return ens


INPUTS = {"X": np.array([[0.1, 0.5, 0.3, 0.9, 0.2, 0.05]], np.float32), "TEXT": np.array([[b"cat"]], dtype=object)}
EXPECTED = {"PROBS": INPUTS["X"] * 2, "LABEL": np.array([[b"CAT"]], dtype=object)}


def test_a_mapping_gives_each_output_its_check_and_bytes_stay_exact() -> None:
    ens = _classifier()
    ens.sample("s", INPUTS, EXPECTED, {"PROBS": TopK(k=5)})
    (sample,) = ens.samples
    assert sample.check_for("PROBS", DType.FP32) == TopK(5)
    assert sample.check_for("LABEL", DType.BYTES) == Exact()
    whole = _classifier("whole")
    whole.sample("s", INPUTS, EXPECTED, Tolerance(atol=1e-3))  # one check for all: BYTES still exact
    assert whole.samples[0].check_for("LABEL", DType.BYTES) == Exact()
    assert whole.samples[0].check_for("PROBS", DType.FP32) == Tolerance(atol=1e-3)


@pytest.mark.parametrize(("tolerance", "message"), [
    ({"PROB": TopK(k=2)}, r"sample 's': tolerance for unknown output 'PROB'; the ensemble's outputs are "
                          r"\['LABEL', 'PROBS'\]"),
    ({"LABEL": TopK(k=1)}, r"sample 's': TopK on output 'LABEL', which is BYTES \(not scores\)"),
    ({"LABEL": Tolerance(atol=1e-3)}, r"a numeric Tolerance for output 'LABEL', which is BYTES and compared exactly"),
    ({"PROBS": TopK(k=7)}, r"output 'PROBS' \(dims \[6\]\): TopK\(k=7\) needs at least 7 classes along the last "
                           r"axis, the output has 6; lower k"),
    ("atol", r"sample 's': tolerance must be a Tolerance, TopK or Exact"),
])
def test_wrong_checks_are_refused_before_a_build(tolerance: object, message: str) -> None:
    ens = _classifier()
    with pytest.raises(DeclarationError, match=message):
        ens.sample("s", INPUTS, EXPECTED, tolerance)  # type: ignore[arg-type]  # outputs declared: checked here
        ens.validate()  # an unknown name may be an output declared later: checked with the ensemble


def test_top_k_needs_a_whole_number_of_classes() -> None:
    with pytest.raises(DeclarationError, match=r"TopK\(k=0\): k must be a whole number of classes, 1 or more"):
        TopK(k=0)


def test_a_tolerance_declared_before_its_output_is_checked_when_the_ensemble_is() -> None:
    ens = Ensemble("late", max_batch_size=4)
    x = ens.input("X", "FP32", [6])
    ens.sample("s", {"X": INPUTS["X"]}, {"P": INPUTS["X"]}, {"P": TopK(k=3), "Q": Exact()})
    step = PythonStep("score", basic_steps.double, inputs=[Tensor("x", "FP32", [6])],
                      outputs=[Tensor("y", "FP32", [6])],
                      max_batch_size=4)
    ens.output("P", step(x))
    with pytest.raises(DeclarationError, match=r"ensemble 'late' sample 's': tolerance for unknown output 'Q'"):
        ens.validate()


def test_top_k_on_a_variable_class_axis_is_checked_against_the_expected_value(tmp_path: Path) -> None:
    ens = Ensemble("variable", max_batch_size=4)
    step = PythonStep("score", basic_steps.double, inputs=[Tensor("x", "FP32", [-1])],
                      outputs=[Tensor("y", "FP32", [-1])],
                      max_batch_size=4)
    ens.output("P", step(ens.input("X", "FP32", [-1])))
    ens.sample("short", {"X": np.ones((1, 3), np.float32)}, {"P": np.full((1, 3), 2, np.float32)}, TopK(k=5))
    with pytest.raises(DeclarationError, match=r"sample 'short', output 'P' \(expected shape \[1, 3\]\): TopK\(k=5\) "
                                               r"needs at least 5 classes along the last axis, the output has 3"):
        build_ensemble(ens, tmp_path, "local")
    assert not list(tmp_path.iterdir())


def test_replay_judge_prints_exact_for_bytes_and_each_outputs_own_check() -> None:
    from conch.verdicts import judge

    got = {"PROBS": EXPECTED["PROBS"] * 0.5, "LABEL": EXPECTED["LABEL"].copy()}
    row = judge("clf.tar.gz", "s", "kserve", got, EXPECTED, {"PROBS": TopK(k=3), "LABEL": Exact()}, 1.0)
    assert row.passed, row.detail
    assert row.detail == "PROBS: top-1 equal, top-3 set equal, max abs err 0.9; LABEL: exact"
    row = judge("clf.tar.gz", "s", "kserve", got, EXPECTED, Tolerance(atol=1e-3), 1.0)
    assert not row.passed and "LABEL: exact" in row.detail and "(atol=0.001 rtol=1e-05)" in row.detail
