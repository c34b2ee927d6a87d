// Elementwise math (exp, log, sqrt, pow, sigmoid, gelu exact and tanh), their backward, and
// eq's zero test (see kernels.h; the formulas are src/ops/device_ops.h, shared with the host
// tests).
#include "ops/cuda/launch.cuh"

namespace lockstep::kernels::cuda {

namespace {

namespace sh = ::lockstep::kernels::shared;

template <class T>
__global__ void math_forward_kernel(Math op, const T* x, T* y, std::int64_t n, double param) {
  LOCKSTEP_GRID_STRIDE(i, n) {
    const T v = x[i];
    T out = v;
    switch (op) {
      case Math::Exp:
        out = sh::exp_fwd(v);
        break;
      case Math::Log:
        out = sh::log_fwd(v);
        break;
      case Math::Sqrt:
        out = sh::sqrt_fwd(v);
        break;
      case Math::Pow:
        out = sh::pow_fwd(v, param);
        break;
      case Math::Sigmoid:
        out = sh::sigmoid_fwd(v);
        break;
      case Math::Gelu:
        out = sh::gelu_fwd(v);
        break;
      case Math::GeluTanh:
        out = sh::gelu_tanh_fwd(v);
        break;
    }
    y[i] = out;
  }
}

template <class T>
__global__ void math_backward_kernel(Math op, const T* g, const T* saved, T* gi, std::int64_t n,
                                     double param) {
  LOCKSTEP_GRID_STRIDE(i, n) {
    const T gv = g[i], s = saved[i];
    T out = gv;
    switch (op) {
      case Math::Sqrt:
        out = sh::sqrt_bwd(gv, s);
        break;
      case Math::Pow:
        out = sh::pow_bwd(gv, s, param);
        break;
      case Math::Sigmoid:
        out = sh::sigmoid_bwd(gv, s);
        break;
      case Math::Gelu:
        out = sh::gelu_bwd(gv, s);
        break;
      case Math::GeluTanh:
        out = sh::gelu_tanh_bwd(gv, s);
        break;
      case Math::Exp:
      case Math::Log:
        break;  // composed from mul / div by the op layer; never launched
    }
    gi[i] = out;
  }
}

const char* math_name(Math op) {
  switch (op) {
    case Math::Exp:
      return "exp";
    case Math::Log:
      return "log";
    case Math::Sqrt:
      return "sqrt";
    case Math::Pow:
      return "pow";
    case Math::Sigmoid:
      return "sigmoid";
    case Math::Gelu:
    case Math::GeluTanh:
      return "gelu";
  }
  return "math";
}

}  // namespace

template <class T>
void math_forward(Math op, const T* x, T* y, std::int64_t n, double param, Exec exec) {
  detail::launch_n(math_name(op), n, exec, math_forward_kernel<T>, op, x, y, n, param);
}

template <class T>
void math_backward(Math op, const T* g, const T* saved, T* gi, std::int64_t n, double param,
                   Exec exec) {
  detail::launch_n(math_name(op), n, exec, math_backward_kernel<T>, op, g, saved, gi, n, param);
}

#define LOCKSTEP_INSTANTIATE(T)                                                             \
  template void math_forward<T>(Math, const T*, T*, std::int64_t, double, Exec);            \
  template void math_backward<T>(Math, const T*, const T*, T*, std::int64_t, double, Exec);
LOCKSTEP_INSTANTIATE(float)
LOCKSTEP_INSTANTIATE(double)
#undef LOCKSTEP_INSTANTIATE

}  // namespace lockstep::kernels::cuda
