"""make_strings.py DIR - ONNX models with STRING tensors, for
tests/test_onnx_strings.sh: suite-style tests (model.onnx and
test_data_set_0 with input_N.pb and output_N.pb) under DIR/simple, which
test_onnx_suite --data DIR runs, and models the importer must refuse under
DIR/bad (tests/test_onnx_strings.sh has the error each must give)."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]


def strings(name, values, shape):
    return helper.make_tensor(name, TensorProto.STRING, shape, [v.encode() for v in values])


def save_test(name, graph, inputs, outputs):
    d = os.path.join(out, "simple", name)
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(d, "model.onnx"))
    for kind, tensors in (("input", inputs), ("output", outputs)):
        for i, t in enumerate(tensors):
            with open(os.path.join(d, "test_data_set_0", "%s_%d.pb" % (kind, i)), "wb") as f:
                f.write(t.SerializeToString())


def save_bad(name, graph):
    os.makedirs(os.path.join(out, "bad"), exist_ok=True)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, os.path.join(out, "bad", name + ".onnx"))


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def normalizer(x, y, **attrs):
    return helper.make_node("StringNormalizer", [x], [y], **attrs)


# A STRING initializer normalized: the graph has no inputs at all.
save_test(
    "test_str_initializer",
    helper.make_graph(
        [normalizer("w", "y", case_change_action="LOWER", stopwords=["the"])],
        "str_initializer", [], [vi("y", TensorProto.STRING, [2])],
        initializer=[strings("w", ["The", "Quick", "fox"], [3])]),
    [], [strings("y", ["quick", "fox"], [2])])

# UTF-8 passes through the case change untouched but for ASCII letters; an
# Identity of the input is a second output.
save_test(
    "test_str_utf8_identity",
    helper.make_graph(
        [normalizer("x", "y", case_change_action="UPPER", is_case_sensitive=1, stopwords=["Stra\u00dfe"]),
         helper.make_node("Identity", ["x"], ["z"])],
        "str_utf8", [vi("x", TensorProto.STRING, [1, 4])],
        [vi("y", TensorProto.STRING, [1, 3]), vi("z", TensorProto.STRING, [1, 4])]),
    [strings("x", ["caf\u00e9", "Stra\u00dfe", "stra\u00dfe", "na\u00efve"], [1, 4])],
    [strings("y", ["CAF\u00e9", "STRA\u00dfE", "NA\u00efVE"], [1, 3]),
     strings("z", ["caf\u00e9", "Stra\u00dfe", "stra\u00dfe", "na\u00efve"], [1, 4])])

# Every element a stop word on [1, C]: [1, 1] holding "".
save_test(
    "test_str_all_dropped_2d",
    helper.make_graph(
        [normalizer("x", "y", stopwords=["A", "b"])],
        "str_all", [vi("x", TensorProto.STRING, [1, 3])], [vi("y", TensorProto.STRING, [1, 1])]),
    [strings("x", ["a", "B", "A"], [1, 3])], [strings("y", [""], [1, 1])])

x4 = [vi("x", TensorProto.STRING, [4])]
save_bad("locale", helper.make_graph(
    [normalizer("x", "y", case_change_action="UPPER", locale="tr_TR")], "bad", x4, [vi("y", TensorProto.STRING, [4])]))
save_bad("undeclared", helper.make_graph(
    [normalizer("x", "y", stopwords=["a"])], "bad", x4, [helper.make_tensor_value_info("y", TensorProto.STRING, None)]))
save_bad("title", helper.make_graph(
    [normalizer("x", "y", case_change_action="TITLE")], "bad", x4, [vi("y", TensorProto.STRING, [4])]))
save_bad("cast", helper.make_graph(
    [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)], "bad", x4, [vi("y", TensorProto.FLOAT, [4])]))
save_bad("reshape", helper.make_graph(
    [helper.make_node("Reshape", ["x", "s"], ["y"])], "bad", x4, [vi("y", TensorProto.STRING, [2, 2])],
    initializer=[numpy_helper.from_array(np.array([2, 2], dtype=np.int64), "s")]))
save_bad("constant", helper.make_graph(
    [helper.make_node("Constant", [], ["c"], value=strings("v", ["a"], [1])),
     normalizer("c", "y")], "bad", [], [vi("y", TensorProto.STRING, [1])]))
