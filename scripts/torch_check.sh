# The device's torch against the bundle's (scripts/bundle_device.sh copies this file into the bundle,
# and its env.sh sources it): sourced, it defines
#
#   stoker_torch_check BUNDLE_TORCH BUNDLE_CUDA PYTHON TORCH_LIB
#
# which returns 0 when the torch found (PYTHON's, else TORCH_LIB/../version.py) is the version the
# bundle was built against (the same release and the same CUDA build) and, on a machine with an NVIDIA
# driver (nvidia-smi lists a GPU), sees a CUDA device; otherwise it prints one sentence saying what
# differs and what to do, and returns 1. Without the check a mismatch shows later as a missing library
# or as torch.cuda.device_count() == 0, which reads as "no GPU". BUNDLE_CUDA is "None" for a CPU torch.
stoker_torch_check() {
  local want=$1 want_cuda=$2 py=$3 tl=$4 have="" have_cuda="" available="" count="" probe
  if [[ -n $py ]]; then
    probe=$("$py" -c 'import torch
print(torch.__version__, torch.version.cuda, int(torch.cuda.is_available()), torch.cuda.device_count())' 2>/dev/null | tail -n 1)
    read -r have have_cuda available count <<<"$probe"
  fi
  if [[ -z $have && -e $tl/../version.py ]]; then  # no Python: the version from torch's own file
    have=$(sed -n "s/^__version__ = '\(.*\)'/\1/p" "$tl/../version.py")
    have_cuda=$(sed -n "s/^cuda: Optional\[str\] = '\{0,1\}\([^']*\)'\{0,1\}$/\1/p" "$tl/../version.py")
  fi
  if [[ -z $have ]]; then
    echo "env.sh: cannot tell which torch ${py:-$tl} is (python could not import it, and no version.py beside" \
         "its libraries); the bundle needs torch $want"
    return 1
  fi
  if [[ ${have%%+*} != "${want%%+*}" || $have_cuda != "$want_cuda" ]]; then
    echo "env.sh: this machine's torch is $have (CUDA ${have_cuda}) but the bundle was built against $want (CUDA" \
         "$want_cuda): install torch ${want%%+*} built for CUDA $want_cuda (pip's default wheel), or rebuild the bundle" \
         "against this torch (scripts/bundle_device.sh)"
    return 1
  fi
  local gpus=0
  if command -v nvidia-smi >/dev/null 2>&1; then gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU '); fi
  if ((gpus > 0)) && [[ -n $available ]] && [[ $available != 1 || $count == 0 ]]; then
    local driver
    driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)
    echo "env.sh: nvidia-smi lists $gpus GPU(s) (driver ${driver:-unknown}) but torch $have sees none" \
         "(torch.cuda.is_available() is $([[ $available == 1 ]] && echo True || echo False), device_count() $count):" \
         "the driver is likely older than CUDA $want_cuda needs, or CUDA_VISIBLE_DEVICES hides the GPUs"
    return 1
  fi
  return 0
}
