"""Runs a frozen TensorFlow GraphDef with TensorFlow on the CPU: the local stand-in of a
tensorflow_graphdef step. Copied into the model folder and imported by the generated model.py (so it
never imports conch). standin.json lists the graph's input and output node names to feed and fetch."""

import json
import os


class GraphDefRunner:
    framework = "tensorflow"  # what it imports: a stub Python without it runs it in conch's (standin_bridge.py)

    def setup(self, context):
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf

        with open(context.file("standin.json"), encoding="utf-8") as fh:
            spec = json.load(fh)
        with open(context.file("model.graphdef"), "rb") as fh:
            graph_def = tf.compat.v1.GraphDef.FromString(fh.read())
        self.graph = tf.Graph()
        with self.graph.as_default():
            tf.compat.v1.import_graph_def(graph_def, name="")
        threads = max(1, min(4, os.cpu_count() or 1))
        config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads, inter_op_parallelism_threads=1)
        self.session = tf.compat.v1.Session(graph=self.graph, config=config)
        self.inputs = spec["inputs"]
        self.outputs = spec["outputs"]
        self.fetches = [name + ":0" for name in self.outputs]

    def __call__(self, **inputs):
        feeds = {name + ":0": inputs[name] for name in self.inputs if name in inputs}
        results = self.session.run(self.fetches, feeds)
        return dict(zip(self.outputs, results))  # noqa: B905 - runs on the stub Python, 3.8 too

    def teardown(self):
        self.session.close()
