"""Bad inputs to ``vp-study`` (ids ``study-``): result files a study did not write, drawn into tables by
``--table-only`` (issue 58: checked against the study before any table is drawn), and repeated names in list
options (one rule for every comma list). A study's error line is ``NAME study: error: ...``, exit code 2."""

from bad_inputs import Case


def _s(cid, args, match):
    return Case(cid, "vp-study", list(args), match, exit_code=2)


_UF = ["unknown_form", "--table-only", "--out"]
_FIX = r"; it was not written by this version of the unknown_form study"

CASES = [
    _s("study-table-only-other-study", [*_UF, "{studies}/other_study"],
       r"other_study/unknown_form.json: not an unknown_form study's results: no list 'rows' \(its top-level keys: "
       r"results, study\)" + _FIX),
    _s("study-table-only-missing-key", [*_UF, "{studies}/missing_key"], r"row 1 \(node@rk4\) has no key 'errors'" + _FIX),
    _s("study-table-only-wrong-type", [*_UF, "{studies}/wrong_type"],
       r"row 0 \(node@rk4\): 'seed' is \"zero\", expected an integer" + _FIX),
    _s("study-table-only-errors-text", [*_UF, "{studies}/errors_text"],
       r"'errors' is \{\"10\": \"small\"\}, expected an object \{horizon: \[relative errors\]\}"),
    _s("study-table-only-rows-not-list", [*_UF, "{studies}/rows_not_list"], r"no list 'rows'"),
    _s("study-table-only-unknown-system", [*_UF, "{studies}/unknown_system"],
       r"'system' is \"pendulum\", expected one of rigid_body_exp"),
    _s("study-figures-only-missing-key", ["unknown_form", "--figures-only", "--out", "{studies}/missing_key"],
       r"has no key 'errors'"),
    _s("study-systems-repeated", ["unknown_form", "--estimate", "--out", "{out}/uf", "--systems", "rigid_body,rigid_body"],
       r"--systems: 'rigid_body' is given twice; give each once"),
    _s("study-noise-repeated", ["unknown_form", "--estimate", "--out", "{out}/uf", "--noise", "0,0.0"],
       r"--noise: 0.0 is given twice; give each once"),
    _s("study-seeds-repeated", ["unknown_form", "--estimate", "--out", "{out}/uf", "--seeds", "1,1"],
       r"--seeds: 1 is given twice; give each once"),
    _s("study-models-repeated", ["rigid_body", "--table-only", "--out", "{out}/rb", "--models", "vpt,vpt"],
       r"--models: 'vpt' is given twice; give each once"),
    _s("study-models-repeated-merged-before", ["rigid_body_structure", "--table-only", "--out", "{out}/co",
                                               "--models", "vpt,lpnet,vpt"], r"--models: 'vpt' is given twice; give each once"),
    _s("study-context-splits-repeated", ["context", "--print-config", "--out", "{out}/cx", "--splits",
                                         "interpolation,interpolation"], r"--splits: 'interpolation' is given twice"),
    _s("study-context-noise-repeated", ["context", "--print-config", "--out", "{out}/cx", "--noise", "0.01,0.01"],
       r"--noise: 0.01 is given twice"),
    _s("study-preset-unknown", ["compare", "--preset", "coupled_oscilator", "--out", "{out}/co"],
       r"--preset: unknown preset 'coupled_oscilator'; valid: coupled_oscillator \(or a TOML file\)"),
    # --results FILE of every study is checked against its row schema (issue 69; vpintegrator.studies.schema)
    *[_s(f"study-results-{cid}", [study, "--table-only", "--results", f"{{studies}}/{cid}.json", "--out", "{out}/t"],
         match) for study, cid, match in (
        ("partial_observation", "po_other_study", r"po_other_study.json: row 0 \(node@rk4\) has no key 'T'"),
        ("partial_observation", "po_missing_key", r"po_missing_key.json: row 0 \(vpt_T4\) has no key 'T'"),
        ("partial_observation", "po_wrong_type", r"row 0 \(vpt_T4\): 'T' is \"four\", expected an integer"),
        ("partial_observation", "po_row_type", r"po_row_type.json: row 1 is \"vpt\", not an object"),
        ("partial_observation", "po_interval_text", r"'err_t10' is .*expected a number \(or null\) \(at err_t10.median"),
        ("reduction", "red_other_study", r"red_other_study.json: row 0 \(vpt_T4\) has no key 'N'"),
        ("reduction", "red_missing_key", r"row 0 \(PSD-Galerkin k=8\) has no key 'N'; it was not written by this "
                                         r"version of the reduction study"),
        ("reduction", "red_wrong_type", r"row 0 \(PSD-Galerkin k=8\): 'N' is \"forty\", expected an integer"),
        ("reduction", "red_row_type", r"red_row_type.json: row 0 is 3, not an object"),
        ("reduction", "red_not_object", r"not a reduction study's results: no list 'rows' \(it holds a JSON list\)"),
        ("unknown_form", "uf_results_missing_key", r"row 1 \(node@rk4\) has no key 'errors'"),
        ("rigid_body", "rb_string", r"rb_string.json: 'rows.vpff.train_loss_best' is .*expected a number"),
        ("rigid_body_structure", "rbs_string", r"rbs_string.json: row 0 \(lp_transformer\): 'seed' is \"zero\", "
                                               r"expected an integer"),
        ("coupled_oscillator", "co_string", r"'tables.default\[0\].final_rel_error' is \"big\", expected a number"),
    )],
    _s("study-results-cx_missing_key", ["context", "--figures-only", "--results", "{studies}/cx_missing_key.json",
                                        "--out", "{out}/t"], r"row 0 \(g_sympnet\) has no key 'context_len'"),
    # one rule for repeated list entries, names and numbers alike; what is known at plan time refused at plan time
    _s("study-po-systems-repeated", ["partial_observation", "--out", "{out}/po", "--systems",
                                     "coupled_oscillator,coupled_oscillator"],
       r"--systems: 'coupled_oscillator' is given twice; give each once"),
    _s("study-po-approaches-repeated", ["partial_observation", "--out", "{out}/po", "--approaches", "vpt,st,vpt"],
       r"--approaches: 'vpt' is given twice; give each once"),
    _s("study-po-windows-repeated", ["partial_observation", "--out", "{out}/po", "--windows", "2,2"],
       r"--windows: 2 is given twice; give each once"),
    _s("study-reduction-systems-repeated", ["reduction", "--out", "{out}/red", "--systems", "toda,toda"],
       r"--systems: 'toda' is given twice; give each once"),
    _s("study-po-window-longer-than-data", ["partial_observation", "--quick", "--out", "{out}/po", "--systems",
                                            "coupled_oscillator", "--approaches", "vpt", "--windows", "4,60"],
       r"--windows: T = 60 for vpt needs 120 states per training window .* have 101; give shorter windows"),
]
