# Sourced by the comparison scripts (bash): gives PyTorch the OpenBLAS kernels Lockstep uses.
# Debian 12's OpenBLAS 0.3.21 maps CPU models it does not know (a 5th-generation Xeon, family 6
# model 207) to its generic Prescott kernels, ~6x slower GEMMs. Lockstep's CLI and benchmark
# binaries then restart themselves with OPENBLAS_CORETYPE set to what OpenBLAS's own feature
# fallback would pick (include/lockstep/core/blas.h, openblas_coretype_for_cpu). Debian's
# PyTorch loads the same OpenBLAS, so the same rule is applied here, once, for every process the
# script starts: when OPENBLAS_CORETYPE is unset and OpenBLAS reports "Core: Prescott", export
# the core type for the CPU's best instruction set (AVX512-BF16 Cooperlake, AVX-512 F SkylakeX,
# AVX2 Haswell, AVX SandyBridge). A user's OPENBLAS_CORETYPE is kept. Prints what it decided.
if [[ -z "${OPENBLAS_CORETYPE+x}" ]]; then
  _ob_core=$(OPENBLAS_VERBOSE=2 /usr/bin/python3 -c 'import ctypes; ctypes.CDLL("libopenblas.so.0")' \
    2>&1 | sed -n 's/^Core: //p' | head -n 1)
  if [[ "${_ob_core,,}" == prescott ]]; then
    _ob_flags=" $(grep -m 1 '^flags' /proc/cpuinfo | cut -d: -f2) "
    case "$_ob_flags" in
      *" avx512_bf16 "*) export OPENBLAS_CORETYPE=Cooperlake ;;
      *" avx512f "*) export OPENBLAS_CORETYPE=SkylakeX ;;
      *" avx2 "*) export OPENBLAS_CORETYPE=Haswell ;;
      *" avx "*) export OPENBLAS_CORETYPE=SandyBridge ;;
    esac
  fi
  echo "== OpenBLAS kernels: ${OPENBLAS_CORETYPE:-${_ob_core:-unknown}}" \
    "(${OPENBLAS_CORETYPE:+OPENBLAS_CORETYPE set by bench/openblas_env.sh; }OpenBLAS chose ${_ob_core:-?})"
  unset _ob_core _ob_flags
else
  echo "== OpenBLAS kernels: OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE (set by the caller)"
fi
