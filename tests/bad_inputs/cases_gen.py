"""Bad inputs to vp-gen and the generation API."""

from bad_inputs import Case

CASES = [
    Case("gen-hdf5-as-spec", "vp-gen", ["{data}", "--out", "{out}/x.h5"], r"not a TOML text file"),
    Case("gen-dt-zero", "vp-gen", ["{spec}", "--dt", "0", "--out", "{out}/x.h5"], r"--dt must be a finite number > 0"),
]
