"""Which compiled function serves each elementwise ONNX operator, per element type.

Data, not code: adding an element type to an operator is one entry here plus
its ``# pythran export`` line. FLOAT16 is served wherever FLOAT is (widened to
float32 and narrowed back) unless it is listed: a function listed for FLOAT16
takes its bit patterns as ``uint16`` (Abs and Neg touch only the sign bit, 8x
faster than a round trip through float32).
"""

from __future__ import annotations

FLOATS = ("FLOAT", "DOUBLE")
SIGNED = ("INT8", "INT16", "INT32", "INT64")
UNSIGNED = ("UINT8", "UINT16", "UINT32", "UINT64")
INTEGERS = SIGNED + UNSIGNED
NUMBERS = FLOATS + INTEGERS
BOOL = ("BOOL",)

#: operator -> {function of the compiled ``unary`` module: element types}
UNARY = {
    "Abs": {"abs_": NUMBERS, "abs_half": ("FLOAT16",)},
    "Neg": {"neg": FLOATS + SIGNED, "neg_half": ("FLOAT16",)},
    "Relu": {"relu": FLOATS + SIGNED},
    "Exp": {"exp": FLOATS},
    "Log": {"logf": ("FLOAT",), "log": ("DOUBLE",)},
    "Sqrt": {"sqrt": FLOATS},
    "Sigmoid": {"sigmoid": FLOATS},
    "Tanh": {"tanhf": ("FLOAT",), "tanh": ("DOUBLE",)},
    "Not": {"not_": BOOL},
}

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
    "Equal": {"equal": NUMBERS + BOOL},
    "And": {"and_": BOOL},
    "Or": {"or_": BOOL},
    "Xor": {"xor": BOOL},
    "BitwiseAnd": {"bitwise_and": INTEGERS},
    "BitwiseOr": {"bitwise_or": INTEGERS},
    "BitwiseXor": {"bitwise_xor": INTEGERS},
}

#: operators whose output is BOOL whatever the input type
BOOLEAN_OUTPUT = frozenset({"Greater", "Less", "Equal"})
