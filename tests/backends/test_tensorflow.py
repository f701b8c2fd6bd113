"""TensorFlow GraphDef steps: refused for releases without the TensorFlow backend, I/O read from the
graph (names with '/'), deterministic serialization of in-memory graphs, label files."""

from __future__ import annotations

from pathlib import Path

import pytest
import tf_graphs

from conch import BuildError, DeclarationError, Ensemble, Release, Tensor, TensorFlowStep
from conch.builder.repository_build import build_ensemble, render_repository


def affine_ensemble(step: TensorFlowStep) -> Ensemble:
    ens = Ensemble("tf", max_batch_size=8)
    ens.output("Y", step(ens.input("X", "FP32", [4])))
    return ens


@pytest.mark.parametrize("release", ["25.03", "25.10"])
def test_releases_without_the_tensorflow_backend_are_refused_with_the_reason(release: str, tmp_path: Path) -> None:
    step = TensorFlowStep("affine", tf_graphs.affine(), max_batch_size=8)
    with pytest.raises(BuildError, match=rf"tensorflow step 'affine': Triton {release} has no TensorFlow backend "
                                         r"\(it left the containers with 25.03\); build for an earlier release"):
        step.check(Release.of(release))
    for target in ("production", "local"):  # the local target stands in for that same release
        with pytest.raises(BuildError, match=r"ensemble 'tf': tensorflow step 'affine': Triton"):
            build_ensemble(affine_ensemble(step), tmp_path, target, release)
    assert not list(tmp_path.iterdir())


def test_last_release_with_tensorflow_builds() -> None:
    repo = render_repository(affine_ensemble(TensorFlowStep("affine", tf_graphs.affine(), max_batch_size=8)),
                             "production", "25.02")
    assert 'platform: "tensorflow_graphdef"' in repo.files["tf__affine/config.pbtxt"].decode()  # type: ignore[union-attr]


def test_inputs_and_outputs_are_read_from_the_graph() -> None:
    step = TensorFlowStep("affine", tf_graphs.affine(), max_batch_size=8)
    assert step.inputs == (Tensor("inputs/x", "FP32", [4]),)
    assert step.outputs == (Tensor("affine/y", "FP32", [4]),)
    unbatched = TensorFlowStep("affine", tf_graphs.affine())
    assert unbatched.inputs == (Tensor("inputs/x", "FP32", [-1, 4]),)


def test_a_fixed_first_dimension_cannot_batch() -> None:
    with pytest.raises(BuildError, match=r"tensor 'inputs/x' has shape \[1, 4\], but max_batch_size > 0 needs an "
                                         r"unknown first dimension"):
        TensorFlowStep("affine", tf_graphs.affine(batch_dynamic=False), max_batch_size=8)


def test_graph_objects_are_serialized_deterministically() -> None:
    tf = tf_graphs.tensorflow()
    graph_def = tf.compat.v1.GraphDef.FromString(tf_graphs.classifier())
    step = TensorFlowStep("scores", graph_def, max_batch_size=8)
    assert step.artifact.data() == graph_def.SerializeToString(deterministic=True)


def test_a_graph_function_needs_declared_io() -> None:
    with pytest.raises(DeclarationError, match=r"graph is a function, so declare inputs= and outputs="):
        TensorFlowStep("affine", tf_graphs.affine, max_batch_size=8)
    step = TensorFlowStep("affine", tf_graphs.affine, max_batch_size=8, inputs=[Tensor("inputs/x", "FP32", [4])],
                          outputs=[Tensor("affine/y", "FP32", [4])])
    step.check(Release.of("24.10"))


def test_classification_outputs_get_their_label_file() -> None:
    step = TensorFlowStep("scores", tf_graphs.classifier(), max_batch_size=8,
                          inputs=[Tensor("features", "FP32", [4])],
                          outputs=[Tensor("scores", "FP32", [3], labels=["cat", "dog", "fish"])])
    ens = Ensemble("labels", max_batch_size=8)
    ens.output("SCORES", step(ens.input("FEATURES", "FP32", [4])))
    for target in ("production", "local"):
        repo = render_repository(ens, target, "24.10")
        assert repo.files["labels__scores/scores_labels.txt"] == b"cat\ndog\nfish\n"
        assert 'label_filename: "scores_labels.txt"' in repo.files["labels__scores/config.pbtxt"].decode()  # type: ignore[union-attr]


def test_not_a_graphdef_is_reported() -> None:
    with pytest.raises(BuildError, match=r"tensorflow step 'junk': model.graphdef is not a GraphDef"):
        TensorFlowStep("junk", b"\x00not a graph", max_batch_size=8)


def _graph(placeholder_dtype, shape) -> bytes:  # type: ignore[no-untyped-def]
    tf = tf_graphs.tensorflow()
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(placeholder_dtype, shape, name="x")
        tf.identity(x, name="y")
    data: bytes = graph.as_graph_def().SerializeToString(deterministic=True)
    return data


def test_a_tensor_of_a_type_triton_lacks_is_refused() -> None:
    tf = tf_graphs.tensorflow()
    with pytest.raises(BuildError, match=r"tensorflow step 'c': tensor 'x' is complex64, which Triton has no type for"):
        TensorFlowStep("c", _graph(tf.complex64, [None, 2]), max_batch_size=4)


def test_a_tensor_of_unknown_rank_needs_declared_dims() -> None:
    tf = tf_graphs.tensorflow()
    with pytest.raises(BuildError, match=r"tensorflow step 'r': the graph does not know the rank of input 'x'; "
                                         r"declare inputs= with their dims"):
        TensorFlowStep("r", _graph(tf.float32, None), max_batch_size=4)
    declared = TensorFlowStep("r", _graph(tf.float32, None), max_batch_size=4, inputs=[Tensor("x", "FP32", [4])],
                              outputs=[Tensor("y", "FP32", [4])])
    assert [t.dims for t in declared.inputs] == [(4,)]
