import math

import numpy as np

from elfreg.eval._child import DIGEST_THRESHOLD, Opaque, decode_text, encode_output, encode_text


def test_roundtrip_keeps_python_types():
    v = [1, 2.5, -0.0, "s\u00e9", b"\x00\xff", (1, (2,)), {3, 1}, {"k": [None, True]}, {(1, 2): 3},
         3 + 4j, 10 ** 40, -(10 ** 40), float("inf")]
    back = decode_text(encode_text(v))
    assert back == v
    assert type(back[5]) is tuple and type(back[6]) is set and type(back[11]) is int


def test_nan_and_numpy_and_opaque():
    back = decode_text(encode_text([float("nan"), np.float32(1.5), np.arange(3)]))
    assert math.isnan(back[0]) and type(back[1]) is np.float32
    assert isinstance(back[2], np.ndarray) and back[2].tolist() == [0, 1, 2]
    o = decode_text(encode_text(iter([1])))
    assert isinstance(o, Opaque) and o != o and o is not None


def test_equal_sets_and_dicts_encode_equally_whatever_the_order():
    a, b = set(), set()
    for i in range(100):
        a.add(str(i))
    for i in reversed(range(100)):
        b.add(str(i))
    assert encode_text(a) == encode_text(b)
    assert encode_text({"x": 1, "y": 2}) == encode_text({"y": 2, "x": 1})


def test_long_outputs_become_digests():
    small = encode_output(list(range(10)))
    assert small == {"v": "[0,1,2,3,4,5,6,7,8,9]"}
    big = list(range(DIGEST_THRESHOLD // 3))
    d1, d2 = encode_output(big), encode_output(list(big))
    assert "sha" in d1 and d1 == d2 and d1["n"] == len(encode_text(big))
    assert encode_output(big + [1])["sha"] != d1["sha"]
