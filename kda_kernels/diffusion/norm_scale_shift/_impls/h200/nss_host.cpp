// c008: the host path of c007's Triton kernel in C++ (no kernel here: the kernel is nss_kernel.py's, compiled by
// Triton on a signature's first call).
//
// Why: on the H200 box an eager call through c007's Python hot path costs 11.2-12.1 us (fused) and 14.8-15.0 us
// (residual form) on the rows under 2 MB (dev/host_floor.py, dev/results/20261127-host_floor_c007.json), against
// a floor of ~5 us for Triton's C launcher alone and 1.8 us per torch.empty_like from Python; the rest is the
// signature key (~20 attribute reads, tuples, a hash) and the Python frames around the launch. Issue #18 asks for
// <= 10 us. Here the same steps run in one C++ call: read the call's tensors into an integer key, find the kept
// launch, allocate the outputs through torch (at::empty_like, the same op the Python path runs), write the
// pointers into the kept parameter block and cuLaunchKernel on torch's current stream.
//
//   nss(x, weight, bias, scale, shift, norm_type, eps) -> Tensor | HANDBACK | None
//   srnss(residual, x, gate, weight, bias, scale, shift, norm_type, eps) -> (Tensor, Tensor) | HANDBACK | None
//     None: not a kept signature (or grad mode on, a misaligned pointer, another current device, a failed
//     launch): register.py then runs c007's Python path, which checks, launches through Triton and keeps.
//     HANDBACK: the size pre-check (nss_host_rules.h) sends the call to SGLang.
//   keep_nss(args, launch) / keep_srnss(args, launch): register a signature from the checked path. `args` are the
//     call's arguments (the key is built from them exactly as on the hot path); `launch` = (CUfunction, grid,
//     threads per CTA, shared bytes, dense_like_x, slots, values): per kernel parameter, in the order of
//     Triton's generated launcher (register.py host_params, tests/test_host_ext.py checks it against
//     triton.backends.nvidia.driver.make_launcher), the tensor slot it takes (0..8) or -1 and its constant bits.
//   set_handback(residual_limit, same_width_limit), stats() -> (hits, misses, handbacks, failed launches), clear().
//
// Launch: Triton 3.6 launches these kernels with cuLaunchKernelEx and no attribute (no PDL, no cooperative grid,
// one CTA per cluster: keep_* is only called for such launches), i.e. exactly cuLaunchKernel with the same grid,
// block, shared memory, stream and parameters. Graph capture works as for Triton's launch (nothing synchronizes).
// Nothing throws on purpose: a refusal is None, so the Python path decides.
#include <torch/extension.h>

#include <ATen/core/grad_mode.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include <dlfcn.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "nss_host_rules.h"

namespace {

namespace py = pybind11;

// cuda.h: CUresult cuLaunchKernel(CUfunction f, unsigned gridDimX, unsigned gridDimY, unsigned gridDimZ,
//   unsigned blockDimX, unsigned blockDimY, unsigned blockDimZ, unsigned sharedMemBytes, CUstream hStream,
//   void** kernelParams, void** extra); CUfunction and CUstream are pointers, CUresult an enum (0: success).
// Resolved from the driver library Triton and torch have loaded, as Triton's own launcher does.
using LaunchFn = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                         void**, void**);

LaunchFn driver_launch() {
  static const LaunchFn fn = [] {
    void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (lib == nullptr) lib = dlopen("libcuda.so.1", RTLD_LAZY);
    return lib == nullptr ? nullptr : reinterpret_cast<LaunchFn>(dlsym(lib, "cuLaunchKernel"));
  }();
  return fn;
}

// The kernel's pointer parameters, in its signature order (register.py _arguments): y, residual_out, x, residual,
// gate, weight, bias, scale, shift; unused ones hold y (residual_out) or x (the rest), as in the Python path.
enum Slot { kY = 0, kROut, kX, kRes, kGate, kW, kB, kScale, kShift, kSlots };
constexpr int kMaxParams = 64;

struct Entry {
  void* function = nullptr;
  unsigned grid = 0, block = 0, smem = 0;
  bool dense_like_x = true;
  int n_params = 0;
  std::array<int8_t, kMaxParams> slot{};     // -1: a constant, else the pointer slot this parameter takes
  std::array<uint64_t, kMaxParams> value{};  // constant bits, little-endian in the low bytes (what the driver reads)
};

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& k) const noexcept {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : k) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};
using Table = std::unordered_map<std::vector<int64_t>, Entry, KeyHash>;
constexpr size_t kMaxEntries = 256;  // as kda_kernels.launch_cache: a sweep past it starts a fresh table

Table g_nss, g_srnss;
int64_t g_residual_limit = -1, g_same_width_limit = -1;  // set_handback; -1: no pre-check
uint64_t g_hits = 0, g_misses = 0, g_handbacks = 0, g_failed = 0;
PyObject* g_handback = nullptr;  // the module's HANDBACK sentinel: one reference held for the process's life

// One tensor argument (or None) into the key: its Python class, dtype, device, sizes and strides. False for an
// argument that is neither a tensor nor None (the Python path decides). `out` gets the tensor, or nullptr for None.
bool add_tensor(std::vector<int64_t>& key, PyObject* o, const at::Tensor** out) {
  if (o == Py_None) {
    key.push_back(0);
    *out = nullptr;
    return true;
  }
  if (!THPVariable_Check(o)) return false;
  const at::Tensor& t = THPVariable_Unpack(o);
  key.push_back(static_cast<int64_t>(reinterpret_cast<intptr_t>(Py_TYPE(o))));
  key.push_back(static_cast<int64_t>(t.scalar_type()));
  key.push_back(t.is_cuda() ? static_cast<int64_t>(t.get_device()) : -2);
  const int64_t dim = t.dim();
  key.push_back(dim);
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  for (int64_t i = 0; i < dim; ++i) {
    key.push_back(sizes[i]);
    key.push_back(strides[i]);
  }
  *out = &t;
  return true;
}

// norm_type and eps into the key: "layer" / "rms" only (the kernel's contract), eps a Python float or int.
bool add_scalars(std::vector<int64_t>& key, PyObject* norm_type, PyObject* eps) {
  if (!PyUnicode_CheckExact(norm_type)) return false;
  if (PyUnicode_CompareWithASCIIString(norm_type, "layer") == 0) {
    key.push_back(1);
  } else if (PyUnicode_CompareWithASCIIString(norm_type, "rms") == 0) {
    key.push_back(2);
  } else {
    return false;
  }
  double e;
  if (PyFloat_CheckExact(eps)) {
    e = PyFloat_AS_DOUBLE(eps);
  } else if (PyLong_CheckExact(eps)) {
    e = PyLong_AsDouble(eps);
    if (e == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
  } else {
    return false;
  }
  int64_t bits;
  std::memcpy(&bits, &e, sizeof bits);
  key.push_back(bits);
  return true;
}

// The key of a call and its tensors by slot. nss args: x, weight, bias, scale, shift, norm_type, eps; srnss args:
// residual, x, gate, weight, bias, scale, shift, norm_type, eps (the public functions' order).
bool build_key(bool residual_form, PyObject* const* a, std::vector<int64_t>& key,
               std::array<const at::Tensor*, kSlots>& t) {
  key.reserve(64);
  t.fill(nullptr);
  int i = 0;
  if (residual_form && !add_tensor(key, a[i++], &t[kRes])) return false;
  if (!add_tensor(key, a[i++], &t[kX]) || t[kX] == nullptr) return false;
  if (residual_form && (!add_tensor(key, a[i++], &t[kGate]) || t[kRes] == nullptr)) return false;
  if (!add_tensor(key, a[i++], &t[kW]) || !add_tensor(key, a[i++], &t[kB])) return false;
  if (!add_tensor(key, a[i++], &t[kScale]) || t[kScale] == nullptr) return false;
  if (!add_tensor(key, a[i++], &t[kShift]) || t[kShift] == nullptr) return false;
  return add_scalars(key, a[i], a[i + 1]);
}

// The size pre-check on the raw arguments (register.py _surely_handed_back_*): x an exact CUDA torch.Tensor, the
// other operands exact tensors.
bool handed_back(bool residual_form, PyObject* const* a) {
  PyObject* xo = a[residual_form ? 1 : 0];
  if (Py_TYPE(xo) != reinterpret_cast<PyTypeObject*>(THPVariableClass)) return false;
  const at::Tensor& x = THPVariable_Unpack(xo);
  if (!x.is_cuda()) return false;
  if (residual_form) {
    if (g_residual_limit < 0 || Py_TYPE(a[0]) != reinterpret_cast<PyTypeObject*>(THPVariableClass)) return false;
    const at::Tensor& r = THPVariable_Unpack(a[0]);
    return kda_nss_host::surely_handed_back_srnss(x.numel(), x.element_size(), r.numel(), r.element_size(),
                                                  g_residual_limit);
  }
  PyObject* so = a[3];
  PyObject* ho = a[4];
  const auto cls = reinterpret_cast<PyTypeObject*>(THPVariableClass);
  if (g_same_width_limit < 0 || Py_TYPE(so) != cls || Py_TYPE(ho) != cls) return false;
  return kda_nss_host::surely_handed_back_nss(x.numel(), x.element_size(), THPVariable_Unpack(so).element_size(),
                                              THPVariable_Unpack(ho).element_size(), g_same_width_limit);
}

at::Tensor new_like(const at::Tensor& x, bool dense_like_x) {
  // register.py _new_like: empty_like keeps a contiguous x's layout; otherwise a contiguous [B, S, D]
  return dense_like_x ? at::empty_like(x) : at::empty_like(x, at::MemoryFormat::Contiguous);
}

uint64_t addr(const at::Tensor* t) { return reinterpret_cast<uint64_t>(t->const_data_ptr()); }

bool launch(const Entry& e, const std::array<uint64_t, kSlots>& ptr, c10::DeviceIndex device) {
  const LaunchFn fn = driver_launch();
  if (fn == nullptr) return false;
  std::array<uint64_t, kMaxParams> value = e.value;
  std::array<void*, kMaxParams> params{};
  for (int i = 0; i < e.n_params; ++i) {
    if (e.slot[i] >= 0) value[i] = ptr[e.slot[i]];
    params[i] = &value[i];
  }
  void* stream = c10::cuda::getCurrentCUDAStream(device).stream();
  return fn(e.function, e.grid, 1, 1, e.block, 1, 1, e.smem, stream, params.data(), nullptr) == 0;
}

py::object call(bool residual_form, PyObject* const* a) {
  if (at::GradMode::is_enabled()) return py::none();  // the Python path keeps autograd's rules
  if (handed_back(residual_form, a)) {
    ++g_handbacks;
    return py::reinterpret_borrow<py::object>(g_handback);
  }
  std::vector<int64_t> key;
  std::array<const at::Tensor*, kSlots> t{};
  if (!build_key(residual_form, a, key, t)) return py::none();
  const Table& table = residual_form ? g_srnss : g_nss;
  const auto it = table.find(key);
  if (it == table.end()) {
    ++g_misses;
    return py::none();
  }
  const Entry& e = it->second;
  const at::Tensor& x = *t[kX];
  const c10::DeviceIndex device = x.get_device();
  if (c10::cuda::current_device() != device) return py::none();
  at::Tensor y = new_like(x, e.dense_like_x);
  at::Tensor r_out;
  std::array<uint64_t, kSlots> ptr{};
  const uint64_t px = addr(&x);
  ptr[kY] = addr(&y);
  if (residual_form) r_out = new_like(x, e.dense_like_x);
  ptr[kROut] = residual_form ? addr(&r_out) : ptr[kY];
  ptr[kX] = px;
  ptr[kRes] = residual_form ? addr(t[kRes]) : px;
  ptr[kGate] = t[kGate] != nullptr ? addr(t[kGate]) : px;
  ptr[kW] = t[kW] != nullptr ? addr(t[kW]) : px;
  ptr[kB] = t[kB] != nullptr ? addr(t[kB]) : px;
  ptr[kScale] = addr(t[kScale]);
  ptr[kShift] = addr(t[kShift]);
  uint64_t any = 0;
  for (uint64_t p : ptr) any |= p;
  if (any & 15) return py::none();  // the kept binary was specialized for 16-byte-aligned pointers
  if (!launch(e, ptr, device)) {
    ++g_failed;
    return py::none();
  }
  ++g_hits;
  if (residual_form) return py::make_tuple(std::move(y), std::move(r_out));
  return py::cast(std::move(y));
}

py::object nss(py::handle x, py::handle w, py::handle b, py::handle scale, py::handle shift, py::handle norm_type,
               py::handle eps) {
  PyObject* a[] = {x.ptr(), w.ptr(), b.ptr(), scale.ptr(), shift.ptr(), norm_type.ptr(), eps.ptr()};
  return call(false, a);
}

py::object srnss(py::handle residual, py::handle x, py::handle gate, py::handle w, py::handle b, py::handle scale,
                 py::handle shift, py::handle norm_type, py::handle eps) {
  PyObject* a[] = {residual.ptr(), x.ptr(), gate.ptr(), w.ptr(), b.ptr(), scale.ptr(), shift.ptr(), norm_type.ptr(),
                   eps.ptr()};
  return call(true, a);
}

bool keep(bool residual_form, const py::tuple& args, const py::tuple& launch_spec) {
  const size_t n_args = residual_form ? 9 : 7;
  if (args.size() != n_args || launch_spec.size() != 7) return false;
  std::vector<PyObject*> a(n_args);
  for (size_t i = 0; i < n_args; ++i) a[i] = args[i].ptr();
  std::vector<int64_t> key;
  std::array<const at::Tensor*, kSlots> t{};
  if (!build_key(residual_form, a.data(), key, t)) return false;
  const auto slots = launch_spec[5].cast<std::vector<int>>();
  const auto values = launch_spec[6].cast<std::vector<uint64_t>>();
  if (slots.size() != values.size() || slots.size() > static_cast<size_t>(kMaxParams)) return false;
  Entry e;
  e.function = reinterpret_cast<void*>(launch_spec[0].cast<uint64_t>());
  e.grid = launch_spec[1].cast<unsigned>();
  e.block = launch_spec[2].cast<unsigned>();
  e.smem = launch_spec[3].cast<unsigned>();
  e.dense_like_x = launch_spec[4].cast<bool>();
  e.n_params = static_cast<int>(slots.size());
  for (int i = 0; i < e.n_params; ++i) {
    if (slots[i] < -1 || slots[i] >= kSlots) return false;
    e.slot[i] = static_cast<int8_t>(slots[i]);
    e.value[i] = values[i];
  }
  Table& table = residual_form ? g_srnss : g_nss;
  if (table.size() >= kMaxEntries) table.clear();
  table[std::move(key)] = e;
  return true;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  g_handback = py::module_::import("builtins").attr("object")().release().ptr();
  m.attr("HANDBACK") = py::reinterpret_borrow<py::object>(g_handback);
  m.def("nss", &nss, "fused_norm_scale_shift through a kept launch: Tensor, HANDBACK or None");
  m.def("srnss", &srnss, "fused_scale_residual_norm_scale_shift through a kept launch: (y, residual_out), "
        "HANDBACK or None");
  m.def("keep_nss", [](const py::tuple& args, const py::tuple& spec) { return keep(false, args, spec); });
  m.def("keep_srnss", [](const py::tuple& args, const py::tuple& spec) { return keep(true, args, spec); });
  m.def("set_handback", [](int64_t residual_limit, int64_t same_width_limit) {
    g_residual_limit = residual_limit;
    g_same_width_limit = same_width_limit;
  });
  m.def("stats", [] { return py::make_tuple(g_hits, g_misses, g_handbacks, g_failed); });
  m.def("clear", [] {
    g_nss.clear();
    g_srnss.clear();
  });
}
