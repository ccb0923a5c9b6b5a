# shellcheck shell=bash disable=SC2034   # sourced; the names are read by the scripts that source it
# Shared by the VM scripts (scripts/vm-box, vm-up, vm-test, libvirt-start): host packages and names.
#
# Everything the VM scripts create is named with the prefix tb-: the box, the libvirt domain, its
# management network and storage pool.
VM_BOX_NAME=${TESTBED_BOX_NAME:-tb-debian12}
VM_POOL=tb-pool
VM_POOL_DIR=/var/lib/libvirt/images/tb-pool
VM_NETWORK=tb-vagrant

# What the host needs to build the box and run it under libvirt (Debian 12 / Ubuntu 22.04+ package names).
VM_HOST_PACKAGES=(
    vagrant vagrant-libvirt libvirt-daemon-system libvirt-clients qemu-system-x86 qemu-utils dnsmasq-base
    debootstrap fdisk extlinux syslinux-common e2fsprogs rsync openssh-client python3-venv
)

vm_host_packages() {
    local p missing=()
    for p in "${VM_HOST_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "vm: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || { echo "vm: apt-get update failed" >&2; return 1; }
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
        || { echo "vm: could not install ${missing[*]}" >&2; return 1; }
}

# True when /dev/kvm can run a guest. A /dev/kvm that exists is not enough (some hosts expose one that
# cannot boot a stock kernel): TESTBED_VM_ACCEL=kvm|tcg overrides the guess.
vm_kvm_usable() {
    case "${TESTBED_VM_ACCEL:-auto}" in
        kvm) return 0 ;;
        tcg) return 1 ;;
    esac
    [ -r /dev/kvm ] && [ -w /dev/kvm ] || return 1
    grep -qE '^flags.*\b(vmx|svm)\b' /proc/cpuinfo
}

# The settings every Vagrant call on the local box needs (the Vagrantfile reads them).
vm_env() {
    export TESTBED_BOX=$VM_BOX_NAME
    export VAGRANT_DEFAULT_PROVIDER=libvirt
    export TESTBED_LIBVIRT_POOL=$VM_POOL
    export TESTBED_LIBVIRT_NETWORK=$VM_NETWORK
    export TESTBED_LIBVIRT_NETWORK_ADDRESS=${TESTBED_LIBVIRT_NETWORK_ADDRESS:-192.168.123.0/24}
    export TESTBED_WHEELS=$PWD/build/wheels
    [ -f build/vm-images/tb-host.tar ] && export TESTBED_IMAGES=$PWD/build/vm-images
    export TESTBED_VM_CPUS=${TESTBED_VM_CPUS:-2}
    export TESTBED_VM_MEMORY=${TESTBED_VM_MEMORY:-8192}
    mkdir -p build/vm
    export TESTBED_VM_SERIAL_LOG=$PWD/build/vm/serial.log
}

# Python wheels of requirements.txt and the tf extra (the VM provisions with it), and the editable install's
# build backend, for offline provisioning, from the host's own pip configuration; remade when either changes.
# The marker (.requirements) is written only once pip has resolved every requirement from the folder alone,
# and is believed only while that still holds: a folder that cannot provision the VM offline is never "done".
vm_wheels() {
    local dir=build/wheels
    if cat requirements.txt requirements-tf.txt | cmp -s - "$dir/.requirements" 2>/dev/null \
            && vm_wheels_complete "$dir"; then
        return 0
    fi
    echo "vm: collecting Python wheels into $dir"
    rm -f "$dir/.requirements"
    mkdir -p "$dir" || return 1
    # The checkout's .venv has no pip of its own (scripts/setup): pip is the kept packages' one.
    .venv/bin/python -m pip wheel -q --disable-pip-version-check -w "$dir" -r requirements.txt \
            -r requirements-tf.txt 'setuptools>=61' wheel \
        || { echo "vm: pip wheel failed: $dir cannot provision the VM offline" >&2; return 1; }
    vm_wheels_complete "$dir" \
        || { echo "vm: $dir does not hold every requirement (pip cannot resolve them offline from it)" >&2; return 1; }
    cat requirements.txt requirements-tf.txt > "$dir/.requirements"
}

# True when pip resolves every requirement (and the build backend) from DIR alone, with no index: what the VM's
# offline provisioning (PIP_NO_INDEX, PIP_FIND_LINKS) will do. Installs nothing. --isolated: the host's pip
# configuration is not read (its find-links would add to DIR's, not replace them).
vm_wheels_complete() {
    local dir=$1
    [ -d "$dir" ] || return 1
    .venv/bin/python -m pip install --isolated -q --disable-pip-version-check --dry-run \
        --ignore-installed --no-index --find-links "$dir" -r requirements.txt -r requirements-tf.txt \
        'setuptools>=61' wheel >/dev/null 2>&1
}

# vagrant, without the box upload's thousands of carriage-return progress lines.
vm_vagrant() {
    vagrant "$@" 2>&1 | stdbuf -oL tr '\r' '\n' | grep --line-buffered -v 'Progress: '
    return "${PIPESTATUS[0]}"
}

# The emulated hosts' image (tb-host, with its first stage tb-host-deps: a derived image builds on it), built here (scripts/docker-image, cached by its inputs) and saved to
# build/vm-images for the VM to load: built inside a VM under software emulation it takes over 10 minutes.
# Saved again only when the image's inputs changed. Starts a Docker engine for the while if none runs.
vm_host_image() {
    local dir=build/vm-images rc=0 digest
    mkdir -p "$dir" || return 1
    digest=$(.venv/bin/python -c 'from testbed.fabric.backends.image import inputs_digest; print(inputs_digest())') \
        || return 1
    if [ -f "$dir/tb-host.tar" ] && [ "$(cat "$dir/tb-host.inputs" 2>/dev/null)" = "$digest" ]; then
        echo "vm: host image saved already (inputs $digest)"; return 0
    fi
    scripts/dockerd-start || return 1
    { scripts/docker-image && rm -f "$dir/tb-host.inputs" && docker save -o "$dir/tb-host.tar" tb-host:latest tb-host-deps:latest \
        && echo "$digest" > "$dir/tb-host.inputs"; } || rc=1
    scripts/dockerd-stop >/dev/null
    [ $rc = 0 ] && echo "vm: host image saved to $dir/tb-host.tar ($(du -h "$dir/tb-host.tar" | cut -f1))"
    return $rc
}
