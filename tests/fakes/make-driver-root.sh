#!/bin/sh
# Stand-in for a host with the NVIDIA driver (tests only; tests/fakes/README.md,
# "Driver root"): make-driver-root.sh DIR VERSION NGPUS [MIG-MINORS-LINES...]
# creates, under DIR, the driver's user-space files as a distribution installs
# them (versioned libraries in a multiarch directory with soname symlinks, a
# stray 32-bit copy, an older version's leftover, tools in /usr/bin), empty
# files standing for the device nodes (/dev/nvidia<N>, nvidiactl, nvidia-uvm,
# nvidia-uvm-tools, nvidia-caps/) and /proc/driver/nvidia-caps/mig-minors.
set -eu
dir=$1 ver=$2 n=$3
shift 3
lib=$dir/usr/lib/x86_64-linux-gnu
mkdir -p "$lib" "$dir/usr/lib/i386-linux-gnu" "$dir/usr/bin" "$dir/dev/nvidia-caps" \
    "$dir/proc/driver/nvidia-caps"
for l in libcuda libnvidia-ml libnvidia-ptxjitcompiler libnvidia-nvvm libnvidia-cfg \
         libnvidia-opencl libnvidia-allocator; do
    echo "$l $ver" >"$lib/$l.so.$ver"
    ln -sf "$l.so.$ver" "$lib/$l.so.1"
done
ln -sf libcuda.so.1 "$lib/libcuda.so"
echo old >"$lib/libcuda.so.470.00.01"            # leftover of an older driver: not mounted
echo i386 >"$dir/usr/lib/i386-linux-gnu/libcuda.so.$ver" # 32-bit: not mounted
echo other >"$lib/libnvidia-glcore.so.$ver"      # graphics, not a compute library
for b in nvidia-smi nvidia-debugdump nvidia-persistenced nvidia-cuda-mps-control \
         nvidia-cuda-mps-server; do
    printf '#!/bin/sh\n' >"$dir/usr/bin/$b"
    chmod +x "$dir/usr/bin/$b"
done
i=0
while [ "$i" -lt "$n" ]; do
    : >"$dir/dev/nvidia$i"
    i=$((i + 1))
done
for d in nvidiactl nvidia-uvm nvidia-uvm-tools nvidia-modeset; do : >"$dir/dev/$d"; done
: >"$dir/proc/driver/nvidia-caps/mig-minors"
for line in "$@"; do
    echo "$line" >>"$dir/proc/driver/nvidia-caps/mig-minors"
    : >"$dir/dev/nvidia-caps/nvidia-cap${line##* }"
done
