"""wheelwright recipe prelude, injected at the top of an upstream setup.py (stdlib and setuptools only, Python 3.9+).

Upstream setup.py files compute the version, the torch requirement and the nvcc arch flags each in their own way,
but all of them hand the results to one setup() call. The recipe renames that call to wheelwright_setup(), which
forces the job's values there and stops the build when the arguments no longer have the shape the recipe expects,
rather than let a wheel with upstream's arch list or an unlabelled version through.
"""

import re
import urllib.request

import setuptools

wheelwright_upstream_setup = setuptools.setup

# Assigned by the recipe below the prelude: identifier, version, torch_requirement, torch_in_install_requires, arch_kind
# ("cuda" or "rocm") and arch_flags (None leaves the arch flags to torch's own arch-list variable).
WHEELWRIGHT_JOB = {}

WHEELWRIGHT_ARCH_OPTIONS = {
    "cuda": ("-gencode", "--generate-code", "-arch", "--gpu-architecture", "-code", "--gpu-code"),
    "rocm": ("--offload-arch", "--amdgpu-target", "-amdgpu-target"),
}
# What an arch left behind in some other option would look like.
WHEELWRIGHT_STRAY_ARCH = {"cuda": re.compile(r"\b(?:sm|compute)_\d"), "rocm": re.compile(r"\bgfx\d")}
WHEELWRIGHT_TORCH = re.compile(r"^\s*torch\s*(?:$|[\[<>=!~;@ (])", re.IGNORECASE)


class WheelwrightRecipeError(RuntimeError):
    """setup.py's arguments no longer have the shape the recipe expects: the recipe needs updating."""


def wheelwright_split_arch_flags(flags, kind):
    """``flags`` without their arch options, and the options removed (an option and its separate value go together)."""
    options = WHEELWRIGHT_ARCH_OPTIONS[kind]
    kept, removed = [], []
    index = 0
    while index < len(flags):
        flag = flags[index]
        name = re.split(r"[= ]", flag, maxsplit=1)[0]
        width = (1 if name != flag else 2) if name in options else 0
        if width:
            removed.extend(flags[index:index + width])
        else:
            kept.append(flag)
        index += width or 1
    return kept, removed


def wheelwright_set_arch_flags(ext_modules, kind, arch_flags, where):
    """Replace every extension's nvcc arch options with ``arch_flags``; fail unless upstream passed some there."""
    upstream = []
    for ext in ext_modules:
        args = getattr(ext, "extra_compile_args", None)
        if not isinstance(args, dict) or not isinstance(args.get("nvcc"), list):
            raise WheelwrightRecipeError(f"{where}: extension {ext.name} has no extra_compile_args['nvcc'] list")
        kept, removed = wheelwright_split_arch_flags(args["nvcc"], kind)
        stray = [flag for flag in kept if WHEELWRIGHT_STRAY_ARCH[kind].search(flag)]
        if stray:
            raise WheelwrightRecipeError(f"{where}: extension {ext.name}: unrecognised arch flags {stray}")
        upstream.extend(removed)
        args["nvcc"] = kept + list(arch_flags)
    if not upstream:
        raise WheelwrightRecipeError(
            f"{where}: setup.py passed no {kind} arch flags to any extension; it changed shape"
        )
    return upstream


def wheelwright_pin_torch(requirements, pin):
    """``requirements`` with every torch entry replaced by ``pin``, and how many there were."""
    if isinstance(requirements, str):
        requirements = requirements.splitlines()
    pinned = [pin if WHEELWRIGHT_TORCH.match(str(r)) else r for r in requirements]
    return pinned, sum(1 for r in requirements if WHEELWRIGHT_TORCH.match(str(r)))


def wheelwright_no_download(url, *args, **kwargs):
    raise WheelwrightRecipeError(f"setup.py tried to download {url}; wheelwright builds compile from source")


def wheelwright_setup(**kwargs):
    job = WHEELWRIGHT_JOB
    where = "wheelwright recipe for " + job["identifier"]
    public = job["version"].split("+")[0]
    if str(kwargs.get("version", "")).split("+")[0] != public:
        raise WheelwrightRecipeError(f"{where}: setup.py computes version {kwargs.get('version')!r}, not {public}")
    kwargs["version"] = job["version"]
    requirements, found = wheelwright_pin_torch(kwargs.get("install_requires") or [], job["torch_requirement"])
    if job["torch_in_install_requires"] and not found:
        raise WheelwrightRecipeError(f"{where}: install_requires does not list torch: {requirements}")
    kwargs["install_requires"] = requirements
    if not kwargs.get("ext_modules"):
        raise WheelwrightRecipeError(f"{where}: setup.py declares no extension modules (is a SKIP_CUDA_BUILD set?)")
    if job["arch_flags"] is not None:
        wheelwright_set_arch_flags(kwargs["ext_modules"], job["arch_kind"], job["arch_flags"], where)
    # The wheel written here is only the repair's input (auditwheel unpacks it, provenance deflates what ships):
    # stored, the build skips deflating the extension, ~300 MB and ~10 s at the end of a full-arch compile.
    kwargs.setdefault("options", {}).setdefault("bdist_wheel", {}).setdefault("compression", "stored")
    return wheelwright_upstream_setup(**kwargs)


def wheelwright_block_downloads():
    """Upstream's bdist_wheel fetches a prebuilt wheel unless its force-build switch is set; should that switch
    ever be missed, the build fails instead of shipping upstream's binary."""
    urllib.request.urlretrieve = wheelwright_no_download
