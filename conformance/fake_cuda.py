"""A CUDA target for code generation on a machine with no GPU.

Inductor decides what code to generate from the device of the graph's tensors,
from `torch.cuda` queries and from Triton's active driver. Inside `target(arch)`
all three answer for a chosen GPU preset, so Inductor writes the CUDA wrapper
and the Triton kernels of a graph whose tensors are on `cuda` — without
compiling or running any kernel (codegen only, see `conformance.codegen`).

The seams are private to torch and Triton. Each is checked on entry; if a
release moves one, `SeamMoved` names it and the torch version instead of letting
code generation fall back to the CPU silently.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
from unittest import mock

import torch


class SeamMoved(RuntimeError):
    """A private torch or Triton hook this target relies on is not where it was."""


@dataclasses.dataclass(frozen=True)
class Preset:
    """What a GPU answers about itself: enough for Inductor's heuristics."""

    name: str
    major: int
    minor: int
    multi_processor_count: int
    total_memory: int
    max_shared_mem: int
    l2_cache_size: int
    gcn_arch_name: str = ""
    warp_size: int = 32
    regs_per_multiprocessor: int = 65536
    max_threads_per_multi_processor: int = 2048
    clock_rate: int = 1_980_000  # kHz

    @property
    def capability(self) -> int:
        return self.major * 10 + self.minor


PRESETS = {
    "sm80": Preset("NVIDIA A100-SXM4-80GB", 8, 0, 108, 80 * 2**30, 166912, 40 * 2**20),
    "sm90": Preset("NVIDIA H200", 9, 0, 132, 141 * 2**30, 232448, 50 * 2**20),
}


def preset(arch: str) -> Preset:
    if arch not in PRESETS:
        raise ValueError(f"arch: {arch!r} is not a known preset; choose one of {sorted(PRESETS)}")
    return PRESETS[arch]


def preset_of_current_device() -> str | None:
    """The preset matching the real GPU (same capability and multiprocessor count), if any."""
    props = torch.cuda.get_device_properties(0)
    for arch, p in PRESETS.items():
        if (p.major, p.minor, p.multi_processor_count) == (props.major, props.minor, props.multi_processor_count):
            return arch
    return None


def _seam(module: str, attr: str):
    """The object at module.attr, or SeamMoved naming it."""
    try:
        obj = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj
    except (ImportError, AttributeError) as e:
        raise SeamMoved(
            f"fake CUDA target: {module}.{attr} is missing in torch {torch.__version__} ({e}); "
            "the codegen target needs updating for this release"
        ) from e


class _Properties:
    """torch.cuda.get_device_properties' answer for the preset."""

    def __init__(self, p: Preset):
        self.name = p.name
        self.major, self.minor = p.major, p.minor
        self.multi_processor_count = p.multi_processor_count
        self.total_memory = p.total_memory
        self.warp_size = p.warp_size
        self.gcn_arch_name = p.gcn_arch_name
        self.regs_per_multiprocessor = p.regs_per_multiprocessor
        self.max_threads_per_multi_processor = p.max_threads_per_multi_processor
        self.shared_memory_per_block_optin = p.max_shared_mem
        self.L2_cache_size = p.l2_cache_size
        self.clock_rate = p.clock_rate
        self.is_integrated = False
        self.uuid = "GPU-00000000-0000-0000-0000-000000000000"


class _Driver:
    """Triton's active driver, for a GPU that is never launched on."""

    def __init__(self, p: Preset):
        from triton.backends.compiler import GPUTarget

        self._target = GPUTarget("cuda", p.capability, p.warp_size)
        props = {"max_shared_mem": p.max_shared_mem, "multiprocessor_count": p.multi_processor_count,
                 "max_num_regs": p.regs_per_multiprocessor, "warpSize": p.warp_size,
                 "sm_clock_rate": p.clock_rate, "mem_clock_rate": 0, "mem_bus_width": 0}
        self.utils = mock.Mock(get_device_properties=lambda device=0: dict(props))

    def get_current_target(self):
        return self._target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        return torch.device("cuda", 0)

    def get_device_interface(self):
        return torch.cuda

    def is_active(self):
        return True


def _answers(props: _Properties) -> dict:
    """What `torch.cuda` and Dynamo's `cuda` interface both answer: one device, the preset's."""
    return {
        "is_available": lambda: True,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "set_device": lambda device: None,
        "synchronize": lambda device=None: None,
        "get_device_properties": lambda device=None: props,
        "is_bf16_supported": lambda including_emulation=True: True,
    }


def _interface(p: Preset, props: _Properties):
    """Dynamo's device interface for `cuda`, answering from the preset."""
    base = _seam("torch._dynamo.device_interface", "CudaInterface")

    class Worker(base.Worker):
        @staticmethod
        def set_device(device: int) -> None:
            pass

        @staticmethod
        def current_device() -> int:
            return 0

        @staticmethod
        def get_device_properties(device=None):
            return props

    class FakeCudaInterface(base):
        pass

    FakeCudaInterface.Worker = Worker
    for name, fn in {
        **_answers(props),
        "get_raw_stream": lambda device=None: 0,
        "get_compute_capability": lambda device=None: p.capability,
        "is_triton_capable": lambda device=None: True,
        "raise_if_triton_unavailable": lambda device=None: None,
        "memory_allocated": lambda device=None: 0,
    }.items():
        setattr(FakeCudaInterface, name, staticmethod(fn))
    return FakeCudaInterface


@contextlib.contextmanager
def target(arch: str):
    """Inductor generates code for `arch` (a PRESETS key) while inside."""
    p = preset(arch)
    _seam("triton.backends.compiler", "GPUTarget")  # triton must be installed
    driver = _seam("triton.runtime.driver", "driver")
    triton_backend = _seam("torch.utils._triton", "triton_backend")
    register = _seam("torch._dynamo.device_interface", "register_interface_for_device")
    get_interface = _seam("torch._dynamo.device_interface", "get_interface_for_device")
    props = _Properties(p)

    previous_interface = get_interface("cuda")  # also runs torch's own registration first
    cuda_answers = {
        **_answers(props),
        "get_device_capability": lambda device=None: (p.major, p.minor),
        "get_device_name": lambda device=None: p.name,
        "_lazy_init": lambda: None,
        "is_initialized": lambda: True,
        "_exchange_device": lambda device: 0,
        "_maybe_exchange_device": lambda device: 0,
        "get_rng_state": lambda device="cuda": torch.zeros(16, dtype=torch.uint8),
        "set_rng_state": lambda new_state, device="cuda": None,
    }
    with contextlib.ExitStack() as stack:
        for name, fn in cuda_answers.items():
            _seam("torch.cuda", name)
            stack.enter_context(mock.patch.object(torch.cuda, name, fn))
        register("cuda", _interface(p, props))
        stack.callback(register, "cuda", previous_interface)
        previous_driver = driver._active
        driver.set_active(_Driver(p))
        stack.callback(driver.set_active, previous_driver)
        triton_backend.cache_clear()
        stack.callback(triton_backend.cache_clear)
        _clear_device_caches()
        stack.callback(_clear_device_caches)
        yield p


def _clear_device_caches() -> None:
    """Answers about the device that Inductor memoizes per process."""
    di = _seam("torch._dynamo.device_interface", "caching_worker_device_properties")
    di.clear()
    for module, name in (("torch._inductor.utils", "get_gpu_shared_memory"),
                         ("torch._inductor.utils", "get_device_tflops"),
                         ("torch._inductor.utils", "get_gpu_dram_gbps"),
                         ("torch.utils._triton", "has_triton")):
        fn = getattr(importlib.import_module(module), name, None)
        if isinstance(fn, functools._lru_cache_wrapper):
            fn.cache_clear()
