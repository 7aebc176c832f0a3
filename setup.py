from setuptools import find_packages, setup

setup(
    name="boost_cells",
    version="0.1.0",
    description="Training-step cells for MindSpore: loss scaling on every target, accumulation, AdaSum.",
    # The level files and feature examples live once, in the repository's top-level configs/ (the tests, docs and
    # bench/ read them there); the package ships that directory as boost_cells/configs/, so an installed package
    # finds them by name (boost_cells.shipped). It holds no Python code: package_dir maps it, package_data takes its
    # JSON files.
    packages=find_packages(include=["boost_cells", "boost_cells.*"]) + ["boost_cells.configs"],
    package_dir={"boost_cells.configs": "configs"},
    package_data={"boost_cells.configs": ["*.json"]},
    python_requires=">=3.9",
    # numpy<2: MindSpore 2.10's extensions are built against NumPy 1.x; under NumPy 2 its PyNative paths print
    # "A module that was compiled using NumPy 1.x cannot be run in NumPy 2" tracebacks. 1.26 runs clean.
    # xxhash: the frozen-prefix cache fingerprints every sample of a batch; XXH3-128 does a 256x3x224x224 float32
    # batch in about 0.01 s on one core (BLAKE2b 0.15 s, blake3 0.027 s), from a well-kept package with wheels for
    # every platform MindSpore has; no adversary picks the samples, so a non-cryptographic 128-bit hash is enough.
    install_requires=["mindspore==2.10.0", "numpy>=1.26,<2", "xxhash>=3.0"],
    extras_require={
        # scikit-learn ships the 8x8 digits data the example trains on, so nothing is downloaded at run time.
        "examples": ["scikit-learn>=1.3"],
        # python -m boost_cells.plot draws BoostMonitor logs; everything else runs without matplotlib.
        "plot": ["matplotlib>=3.5"],
        # pytest-randomly runs the suite in a random order (pytest.ini pins the seed); import-linter checks the
        # import layers (.importlinter, tests/test_layers.py); hypothesis generates the property-based tests' configs,
        # arguments, faults and damaged files (tests/test_config_properties.py, test_constructor_properties.py,
        # test_fault_properties.py, test_files.py) and the msrun jobs' fault plans (tests/test_distributed.py);
        # pytest-xdist runs the suite on both cores (pytest.ini's -n 2: the suite is compile-bound and mostly
        # single-threaded, so two workers nearly halve it).
        "test": ["pytest>=7", "pytest-randomly>=3.15", "import-linter>=2.1", "scikit-learn>=1.3", "matplotlib>=3.5",
                 "hypothesis>=6.100", "pytest-xdist>=3.5"],
    },
)
