"""Which compiled function serves each elementwise ONNX operator, per element type.

Data, not code: adding an element type to an operator is one entry here plus
its ``# pythran export`` line. The 16-bit floats (``HALVES``) are served wherever
FLOAT is (widened to float32 and narrowed back) unless they are listed: a function
listed for them takes their bit patterns as ``uint16`` (Abs and Neg touch only the
sign bit, which both keep where float32 does, instead of a round trip through float32).
"""

from __future__ import annotations

FLOATS = ("FLOAT", "DOUBLE")
SIGNED = ("INT8", "INT16", "INT32", "INT64")
UNSIGNED = ("UINT8", "UINT16", "UINT32", "UINT64")
INTEGERS = SIGNED + UNSIGNED
NUMBERS = FLOATS + INTEGERS
BOOL = ("BOOL",)
#: the 16-bit floats, computed in float32 (see kernels.half)
HALVES = ("FLOAT16", "BFLOAT16")

#: operator -> {function of the compiled ``unary`` module: element types}
UNARY = {
    "Abs": {"abs_": NUMBERS, "abs_half": HALVES},
    "Neg": {"neg": FLOATS + SIGNED, "neg_half": HALVES},
    "Relu": {"relu": FLOATS + SIGNED},
    "Exp": {"exp": FLOATS},
    "Log": {"logf": ("FLOAT",), "log": ("DOUBLE",)},
    "Sqrt": {"sqrt": FLOATS},
    "Reciprocal": {"reciprocal": FLOATS},
    "Sigmoid": {"sigmoid": FLOATS},
    "Tanh": {"tanhf_rational": ("FLOAT",), "tanh": ("DOUBLE",)},
    "Erf": {"erff": ("FLOAT",), "erf": ("DOUBLE",)},
    "Gelu": {"geluf": ("FLOAT",), "gelu": ("DOUBLE",)},
    "LeakyRelu": {"leaky_relu": FLOATS},
    "Clip": {"clip": NUMBERS},
    "Not": {"not_": BOOL},
    "BitwiseNot": {"bitwise_not": INTEGERS},
}

#: operator -> {attribute: ONNX default} of the unary operators with attributes. A number
#: (LeakyRelu's alpha) is passed to the function after its output, in the element type; a
#: string chooses the function (``UNARY_CHOICES``).
UNARY_ATTRIBUTES = {"LeakyRelu": {"alpha": 0.01}, "Gelu": {"approximate": "none"}}

#: operator -> {attribute: {value: {function: element types}}}: the functions an attribute's
#: value other than its default chooses instead of ``UNARY``'s
UNARY_CHOICES = {"Gelu": {"approximate": {"tanh": {"gelu_tanhf": ("FLOAT",),
                                                   "gelu_tanh": ("DOUBLE",)}}}}

#: element types ``unary.cast`` converts from and to, each to every other
CAST = ("FLOAT", "DOUBLE", "INT8", "UINT8", "INT32", "INT64", "BOOL")

#: operator -> {function of the compiled ``rows`` module: element types} (kernels.rows)
ROWS = {
    "Softmax": {"softmax": FLOATS},
    "LogSoftmax": {"log_softmax": FLOATS},
    "ArgMax": {"argmax": NUMBERS},
    "ArgMin": {"argmin": NUMBERS},
    "ReduceSum": {"reduce_sum": FLOATS + ("INT32", "INT64", "UINT32", "UINT64")},
    "ReduceMean": {"reduce_mean": FLOATS},
    "ReduceMax": {"reduce_max": FLOATS + ("INT8", "UINT8", "INT32", "INT64", "UINT32",
                                          "UINT64", "BOOL")},
    "Normalizer": {"normalize": FLOATS},
    # a session's fusion of skl2onnx's eight nodes, not an ONNX operator (kernels.rows)
    "ProbabilityNormalization": {"normalize_probabilities": FLOATS},
}

#: LayerNormalization's functions of the compiled ``rows`` module (kernels.layer_normalization)
LAYER_NORMALIZATION = {"layer_norm": FLOATS}

#: operator -> {function of the compiled ``binary`` module: element types}
BINARY = {
    "Add": {"add": NUMBERS},
    "Sub": {"sub": NUMBERS},
    "Mul": {"mul": NUMBERS},
    "Div": {"div": FLOATS, "idiv16": ("INT8", "INT16", "UINT8", "UINT16"),
            "idiv32": ("INT32", "UINT32"), "idiv": ("INT64",), "udiv": ("UINT64",)},
    "Pow": {"pow_": FLOATS, "ipow": ("INT32", "INT64")},
    "Max": {"max_": NUMBERS},
    "Min": {"min_": NUMBERS},
    "Greater": {"greater": NUMBERS},
    "Less": {"less": NUMBERS},
    "GreaterOrEqual": {"greater_equal": NUMBERS},
    "LessOrEqual": {"less_equal": NUMBERS},
    "Equal": {"equal": NUMBERS + BOOL},
    "And": {"and_": BOOL},
    "Or": {"or_": BOOL},
    "Xor": {"xor": BOOL},
    "BitwiseAnd": {"bitwise_and": INTEGERS},
    "BitwiseOr": {"bitwise_or": INTEGERS},
    "BitwiseXor": {"bitwise_xor": INTEGERS},
}

#: Pow's functions of a base and a float64 exponent (kernels.power): a mixed pair computes in
#: float64 and stores the result in the base's type, as onnxruntime's ``std::pow`` does
POW_WIDE = {"pow_wide": ("FLOAT", "INT32", "INT64")}
#: element types Pow's exponent may take (ONNX's T1), whatever the base's
EXPONENTS = NUMBERS + HALVES

#: The portable grain (elements per thread) of an operator that costs about what an add
#: costs per element, where memory, not arithmetic, sets the serial/parallel crossover.
DEFAULT_GRAIN = 32768

#: element type -> portable grain of every operator on it, where an add on it crosses
#: over elsewhere: an element of one byte moves a quarter of what a float does, so its
#: crossovers lie two octaves above 32768, on the edge of the band calibration keeps
#: around a grain (docs/kernels.md, Portable grains).
ELEMENT_GRAINS = {"INT8": 65536, "UINT8": 65536, "BOOL": 65536}

#: operator -> {portable grain: element types}, over ``ELEMENT_GRAINS``, where an element
#: costs many adds (powers, 64-bit integer division, double-precision transcendentals,
#: division on one byte), so parallel pays off on fewer elements: each grain is four
#: times the median two-thread crossover measured on x86_64_v4, as calibration keeps a
#: value up to two octaves above the crossover it measures (docs/kernels.md). BFLOAT16 takes
#: FLOAT16's: both compute in float32, and convert in one pass each way.
GRAINS = {
    "Pow": {2048: FLOATS, 4096: ("INT32", "INT64"), 8192: HALVES},
    "Div": {4096: ("INT64", "UINT64"), 32768: ("INT8", "UINT8")},
    "Log": {8192: ("DOUBLE",)},
    "Sigmoid": {8192: ("DOUBLE",)},
    "Tanh": {8192: ("DOUBLE",), 16384: ("FLOAT",)},
    "Exp": {16384: ("DOUBLE",)},
    "Sqrt": {16384: ("DOUBLE",)},
    "Erf": {2048: ("DOUBLE",)},
    "Gelu": {2048: ("DOUBLE",)},
    "LayerNormalization": {16384: ("DOUBLE",)},
    "ElementwiseChain": {16384: ("FLOAT",)},
}

#: operator -> {portable grain: element types} of ``parallel.broadcast_minimum_elements``
#: where broadcasts cross over two octaves or more from the operator's equal shapes (four
#: times their median crossover, as above); it is the operator's grain elsewhere.
BROADCAST_GRAINS = {"Pow": {4096: HALVES}}

#: operators whose output is BOOL whatever the input type
BOOLEAN_OUTPUT = frozenset({"Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Equal"})
