# lit configuration for ampjit: FileCheck tests over amp-opt (and, later, plans).
import os

import lit.formats

config.name = "ampjit"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir"]
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = config.ampjit_obj_root

# Our tools first, then FileCheck/not/split-file from llvm-22-tools.
path = os.pathsep.join([config.ampjit_tools_dir, config.llvm_tools_dir,
                        config.environment.get("PATH", os.environ.get("PATH", ""))])
config.environment["PATH"] = path
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))

# ampjit-run built on the emulated CUDA runtime (tests/unit/cuda), where the
# build has the CUDA backend: tests of --backend=cuda run on it in CI.
if os.path.exists(os.path.join(config.ampjit_tools_dir, "ampjit-run-on-emulated-runtime")):
    config.available_features.add("emulated-cuda")
