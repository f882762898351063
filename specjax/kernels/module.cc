// A Python extension module only so that the build installs it beside the package and
// `importlib` finds it; the kernels are reached through the FFI symbols above (ctypes).
#include <Python.h>

static PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_packed_matmul",
                              "specjax's weight-streaming matmul kernels (XLA FFI handlers).",
                              -1, nullptr};

PyMODINIT_FUNC PyInit__packed_matmul(void) { return PyModule_Create(&kModule); }
