"""One source for every figure a user reads (STYLE rules 21 and 24).

- The results page (docs/benchmarks.md) and the results regions of the user pages are rendered from the results files
  under bench/results/ (bench/render.py): the committed pages must be what the files give, so a new results file or
  a hand edit of a rendered figure fails here until ``python bench/render.py`` runs. The page stays a results page:
  under 250 lines, no commit id.
- Outside those regions, a speed-up (``1.31x``), an accuracy change (``-0.97``), a step time (``61 ms``) or a compile
  time (a figure in seconds in a sentence about compiles) on README.md or docs/*.md must be a figure of the results
  files, or its sentence must say it is an example ("for example", "e.g.").
- A value quoted beside a config key (``auto_threshold`` 0.6, ``cache_max_mb`` 2048, ``param_groups`` 3) is the
  shipped file's where the sentence names one file, else a value some shipped file or the code's defaults give; the
  defaults column of docs/configs.md's key table is the code's; the README counts its example network's layers as
  ``split_layers`` does.
"""
import copy
import json
import re
import sys

import pytest

from boost_cells import BoostConfig
from boost_cells.freezing.suffixes.groups import split_layers
from tests.docs_check import code_blocks, commit_id_problems
from tests.launch import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import render  # noqa: E402  pylint: disable=wrong-import-position
import results  # noqa: E402  pylint: disable=wrong-import-position

RECORDS = results.load()
PAGE_LINES = 250
USER_PAGES = [ROOT / "README.md"] + sorted(path for path in (ROOT / "docs").glob("*.md")
                                           if path.name != "benchmarks.md")
EXAMPLE = re.compile(r"\b(?:for example|e\.g\.)", re.IGNORECASE)
RANGE = r"(?:\s*(?:-|to)\s*\d[\d,]*(?:\.\d+)?)?"  # a figure may open a range: "1.64-1.72x", "7.5 to 7.9 s"
SPEED_UP = re.compile(r"(?<![\w.])(\d+\.\d+)(?=" + RANGE + r"x\b)")
CHANGE = re.compile(r"(?<![\w.])([+-]\d+\.\d+)(?![\w.])")
STEP = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)(?=" + RANGE + r"\s?ms\b)")
SECONDS = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?=" + RANGE + r"\s?s\b)")
FENCE = re.compile(r"^ {0,3}```.*?^ {0,3}```", re.MULTILINE | re.DOTALL)
COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)


# ---- rendered from the results files ----

def test_the_results_page_and_the_regions_are_what_the_results_files_give():
    assert render.stale(str(ROOT), RECORDS) == [], "run python bench/render.py"
    page = (ROOT / render.PAGE).read_text(encoding="utf-8")
    assert len(page.splitlines()) < PAGE_LINES
    assert commit_id_problems(ROOT / render.PAGE) == []
    for workload in ("launch", "compute", "augment", "finetune"):
        assert f"## {render.WORKLOADS[workload][0]}" in page
    assert "## What was not measured" in page and "GPU and Ascend" in page and "sink mode" in page


def test_a_changed_result_makes_the_page_and_the_regions_stale():
    changed = copy.deepcopy(RECORDS)
    comparison = next(comparison for record, comparison, _ in render.rows(changed)
                      if comparison["level"] == "O1" and record["workload"] == "compute")  # a row the page shows
    for seed in comparison["seeds"]:
        seed["ratio"] = (seed["ratio"] or 1.0) + 0.5
    if "reported" in comparison:  # a transcribed file's summary
        comparison["reported"]["ratio"] += 0.5
    assert render.stale(str(ROOT), changed) == [render.PAGE, "docs/choosing-a-level.md"]


def test_each_workload_level_shows_its_latest_day_only():
    older = copy.deepcopy(next(record for record in RECORDS if record["workload"] == "compute"
                               and any(c["level"] == "O1" for c in record["comparisons"])))
    older["date"] = "2000-01-01"
    older["comparisons"][-1]["reported"]["ratio"] = 9.99
    assert "9.99x" not in render.render(RECORDS + [older])
    assert "9.99x" in render.render([older])


def test_each_machine_shows_its_latest_row_and_a_transcribed_file_gives_way_to_any():
    """Runs of one workload and level on two CPUs: each CPU's latest file stands, named in its balance, so a figure
    measured where steps are dear does not hide one measured where they are cheap, or the reverse; a transcribed file
    (no CPU recorded) gives way to a later file of either."""
    def run(cpu, date, ratio, provenance=False):
        record = copy.deepcopy(next(record for record in RECORDS if record["workload"] == "compute"
                                    and not record.get("provenance")))
        comparison = next(c for c in record["comparisons"] if c["level"] == "O1")
        for seed in comparison["seeds"]:
            seed["ratio"] = ratio
        record.update(comparisons=[comparison], date=date, time="01:00:00", commit="abc1234",
                      machine={"cpu": cpu, "cores": 2})
        if provenance:
            record.pop("machine")
            record["provenance"] = "transcribed"
        return record

    intel = "Intel(R) Xeon(R) Processor"
    files = [run(intel, "2099-01-01", 6.66), run(intel, "2098-01-01", 5.55), run("AMD EPYC", "2099-01-02", 4.44),
             run(None, "2099-01-01", 3.33, provenance=True)]
    page = render.render(RECORDS + files)
    assert "6.66x" in page and "4.44x" in page and "5.55x" not in page and "3.33x" not in page
    assert "Intel Xeon |" in page and "AMD EPYC |" in page
    assert "3.33x" in render.render(RECORDS + files[3:])


def test_a_day_with_a_file_that_records_its_time_shows_that_file_alone():
    """Several runs of one workload and level on one day: the file written last stands (its ``time``), the files of
    that day that record no time give way to it, and one written earlier that day gives way too."""
    same_day = max((record for record in RECORDS if record["workload"] == "compute"
                    and any(c["level"] == "O1" for c in record["comparisons"])), key=lambda record: record["date"])
    later, earlier = copy.deepcopy(same_day), copy.deepcopy(same_day)
    later["time"], earlier["time"] = "23:59:59", "23:59:58"
    for record, ratio in ((later, 8.88), (earlier, 7.77)):
        for comparison in record["comparisons"]:
            comparison.get("reported", {})["ratio"] = ratio
            for seed in comparison["seeds"]:
                seed["ratio"] = ratio
    page = render.render(RECORDS + [earlier, later])
    assert "8.88x" in page and "7.77x" not in page
    assert "7.77x" in render.render(RECORDS + [earlier])


def test_a_later_run_of_the_same_commit_adds_its_seeds_to_the_row():
    """A run with ``--first-seed`` (seeds 2 and 3 after runs of 0 and 1, and of 1 again) joins the earlier files'
    row where all ran the same commit and epochs: four seeds, the median of the four ratios, the balance the four
    seeds' median. A seed run twice counts once, as the later file gives it; another commit's file stays out."""
    def run(seeds, ratio, step, time, commit="abc1234"):
        record = copy.deepcopy(next(record for record in RECORDS if record["workload"] == "compute"
                                    and not record.get("provenance")))
        comparison = next(c for c in record["comparisons"] if c["level"] == "O1")
        template = comparison["seeds"][0]
        comparison["seeds"] = [{**copy.deepcopy(template), "seed": seed, "ratio": ratio,
                                "balance": {"o0_step_ms": step, "first_compile_s": 1.0}} for seed in seeds]
        record.update(comparisons=[comparison], date="2099-01-01", time=time, commit=commit)
        return record

    first, middle = run([0, 1], 1.10, 100.0, "01:00:00"), run([1], 1.30, 200.0, "01:30:00")
    last = run([2, 3], 1.50, 300.0, "02:00:00")
    (record, _, figures), = [row for row in render.rows(RECORDS + [first, middle, last])
                             if row[0]["date"] == "2099-01-01"]
    assert figures["seeds"] == [0, 1, 2, 3]
    assert figures["round_ratios"] == [1.10, 1.30, 1.50, 1.50] and figures["ratio"] == pytest.approx(1.40)
    assert record["balance"]["o0_step_ms"] == 250.0 and record["time"] == "02:00:00"
    other = run([0, 1], 1.10, 100.0, "01:00:00", commit="def5678")
    (_, _, figures), = [row for row in render.rows(RECORDS + [other, last]) if row[0]["date"] == "2099-01-01"]
    assert figures["seeds"] == [2, 3]


def test_a_row_whose_file_measured_the_routes_work_says_what_it_took_a_call():
    """Under a workload's table, each row whose seeds measured the route's own work (``route_work_ms``) gives its
    median over those seeds against the row's O0 step; a row that did not measure it (an O0 arm, an older file) adds
    no line of its own."""
    record = copy.deepcopy(next(record for record in RECORDS if record["workload"] == "compute"
                                and not record.get("provenance")))
    comparison = next(c for c in record["comparisons"] if c["level"] == "O1")
    for seed, work in zip(comparison["seeds"], (0.25, 0.5, 0.75, None)):
        seed.setdefault("steps", {"base": {}, "arm": {}})["arm"]["route_work_ms"] = work
    record.update(comparisons=[comparison], date="2099-01-01", time="01:00:00", commit="abc1234")
    shown = render.rows(RECORDS + [record])
    assert render.route_work(comparison) == pytest.approx(0.5)
    assert "0.500 ms a call" in " ".join(render.route_work_lines(shown, "compute"))
    for seed in comparison["seeds"]:
        seed["steps"]["arm"].pop("route_work_ms")
    lines = render.route_work_lines(render.rows(RECORDS + [record]), "compute")  # other machines' rows may have one
    assert render.route_work(comparison) is None and not any(render.machine(record) in line for line in lines)


def test_a_row_in_which_no_seed_froze_is_named_under_its_table():
    """Under a workload's table, the rows in which no seed froze a level (each seed's ``froze`` empty) are named, as
    their ratio is not freezing's; a row where one seed froze is not, nor one whose seeds do not record it (null, or
    no field)."""
    record = copy.deepcopy(next(record for record in RECORDS if record["workload"] == "compute"
                                and not record.get("provenance")))
    comparison = next(c for c in record["comparisons"] if c["level"] == "O1")
    for seed in comparison["seeds"]:
        seed["froze"] = {}
    record.update(comparisons=[comparison], date="2099-01-01", time="01:00:00", commit="abc1234")

    def named():
        return "(2099-01-01" in " ".join(render.froze_lines(render.rows(RECORDS + [record]), "compute"))

    assert named()
    comparison["seeds"][-1]["froze"] = {"2": 105}
    assert not named()
    for seed in comparison["seeds"]:
        seed["froze"] = None  # the benchmark did not see what froze
    assert not named()
    for seed in comparison["seeds"]:
        seed.pop("froze")
    assert not named()


def test_a_workload_the_page_does_not_describe_is_refused_not_dropped():
    unknown = copy.deepcopy(RECORDS[0])
    unknown["workload"] = "gpt"
    with pytest.raises(ValueError, match="gpt, which bench/render.py's WORKLOADS does not describe"):
        render.render(RECORDS + [unknown])


# ---- every figure on a user page ----

def prose_units(text):
    """The page's sentences and table rows, outside code blocks, comments and results regions."""
    text = render.REGION.sub("", text)
    text = COMMENT.sub("", FENCE.sub("", text))
    units = []
    for paragraph in re.split(r"\n\s*\n", text):
        lines = paragraph.splitlines()
        if lines and all(line.startswith("|") for line in lines):
            units += lines
            continue
        for item in re.split(r"\n(?=\s*(?:[-*]|\d+\.) )", paragraph):  # each list item on its own
            units += re.split(r"(?<=[.;])\s+(?=[A-Z\[`(*])", " ".join(line.strip() for line in item.splitlines()))
    return units


def figures_in(unit):
    """``[(kind, figure)]`` of a sentence or table row: speed-ups, accuracy changes, step times and, in a sentence about
    compiles, times in seconds."""
    found = [("speed-up", value) for value in SPEED_UP.findall(unit)]
    found += [("accuracy change", value) for value in CHANGE.findall(unit)]
    found += [("step time", value.replace(",", "")) for value in STEP.findall(unit)]
    if "compile" in unit:
        found += [("compile time", value) for value in SECONDS.findall(unit)]
    return found


def known_figures(records):
    """Every figure of the results files as a page would print it, by kind."""
    known = {"speed-up": set(), "accuracy change": set(), "step time": set(), "compile time": set()}
    for record in records:
        step, compile_seconds = record["balance"]["o0_step_ms"], record["balance"]["first_compile_s"]
        if step is not None:
            known["step time"].add(f"{step:.0f}")
        if compile_seconds is not None:
            known["compile time"].update({f"{compile_seconds:.2f}", f"{compile_seconds:.1f}"})
        for comparison in record["comparisons"]:
            figures = results.summary(comparison)
            known["speed-up"].update(f"{ratio:.2f}" for ratio in [figures["ratio"], *(figures["round_ratios"] or [])])
            if figures["accuracy_change"] is not None:
                known["accuracy change"].add(f"{figures['accuracy_change']:+.2f}")
    return known


def figure_problems(text, records):
    known = known_figures(records)
    return [f"{kind} {figure} in: {unit[:160]}" for unit in prose_units(text) if not EXAMPLE.search(unit)
            for kind, figure in figures_in(unit) if figure not in known[kind]]


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda page: page.name)
def test_every_figure_on_a_user_page_is_a_results_figure_or_an_example(page):
    assert figure_problems(page.read_text(encoding="utf-8"), RECORDS) == []


def test_the_figure_check_fails_a_figure_the_results_do_not_hold():
    compute = next(record for record in RECORDS if record["workload"] == "compute"
                   and record["balance"]["o0_step_ms"] is not None)
    ratio = results.summary(compute["comparisons"][-1])["ratio"]
    step = f"{compute['balance']['o0_step_ms']:.0f}"
    assert figure_problems(f"It ran {ratio:.2f}x O0 at {step} ms a step.", RECORDS) == []
    assert figure_problems(f"It ran {ratio + 0.01:.2f}x O0.", RECORDS) == [f"speed-up {ratio + 0.01:.2f} in: It ran "
                                                                           f"{ratio + 0.01:.2f}x O0."]
    assert len(figure_problems("A frozen step of 27 ms became 11.5 ms, -0.37 over six seeds.", RECORDS)) == 3
    assert len(figure_problems("It compiles 7.5 to 7.9 s on 2 workers.", RECORDS)) == 2
    assert figure_problems("Where a step costs, for example, 10 ms and a compile 2.5 s, it waits.", RECORDS) == []
    assert figure_problems("<!-- results: levels -->\n| 9.99x |\n<!-- /results -->\n```bash\nx 9.99x\n```", RECORDS) == []


# ---- defaults quoted on a page ----

SHIPPED = {path.name: json.loads(path.read_text(encoding="utf-8")) for path in (ROOT / "configs").glob("*.json")}
DEFAULTS = BoostConfig.level("O0").to_dict()
# The defaults a page quotes that a user tunes by (thresholds, groups, the cache's limits, AdaSum's groups).
CHECKED_KEYS = {"grad_freeze": ("param_groups", "auto_threshold", "auto_head_ratio", "auto_warmup_share",
                                "auto_interval_share", "total_steps", "payback", "cache_frozen_prefix", "cache_max_mb"),
                "common": ("device_number",)}
KEY_VALUE = re.compile(r"`(?:(\w+)\.)?(\w+)`(?: is)? (?:\(default )?(-?\d+(?:\.\d+)?\b|true\b|false\b|`\"auto\"`)")
FILE = re.compile(r"(?<![\w/.-])(?:configs/)?(\w+\.json)")


def _sections_of(key):
    return [section for section, values in DEFAULTS.items() if isinstance(values, dict) and key in values]


def _value(text):
    return "auto" if text == '`"auto"`' else json.loads(text)


def _file_value(config, section, key):
    level = BoostConfig.level(config.get("level", "O0")).to_dict()
    return config.get(section, {}).get(key, level[section][key])


def default_problems(text):
    """Values of ``CHECKED_KEYS`` quoted as a default (``(default N)``: the code's) or in a sentence that names one
    shipped file (that file's, or its level's default where it leaves the key out); a sentence naming several files
    may quote any of theirs. A value in a sentence that names no file is a choice the page discusses, not checked."""
    problems = []
    for unit in prose_units(text):
        if EXAMPLE.search(unit):
            continue
        files = {name for name in FILE.findall(unit) if name in SHIPPED}
        for match in KEY_VALUE.finditer(unit):
            section, key, quoted = match.groups()
            sections = [section] if section else _sections_of(key)
            if len(sections) != 1 or key not in CHECKED_KEYS.get(sections[0], ()):
                continue
            section, value = sections[0], _value(quoted)
            if "(default" in match.group(0):
                allowed = {DEFAULTS[section][key]}
            elif files:
                allowed = {_file_value(SHIPPED[name], section, key) for name in files}
            else:
                continue
            if value not in allowed:
                problems.append(f"{section}.{key} {quoted} (the files and the code give {sorted(map(str, allowed))}) "
                                f"in: {unit[:160]}")
    return problems


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda page: page.name)
def test_a_value_quoted_beside_a_key_is_the_files_or_the_codes(page):
    assert default_problems(page.read_text(encoding="utf-8")) == []


def test_the_default_check_fails_a_stale_value():
    assert default_problems("`configs/O1.json` sets `auto_threshold` 0.6 and `cache_max_mb` 2048.") == []
    assert len(default_problems("`configs/O1.json` sets `auto_threshold` 0.4.")) == 1
    assert default_problems("`configs/O1.json` and `configs/O2.json` give `auto_threshold` 0.4 or 0.6.") == []
    assert default_problems("A user may set `auto_threshold` 0.3.") == []
    assert len(default_problems("`grad_freeze.cache_max_mb` (default 1024) bounds it.")) == 1


def key_table_defaults():
    """docs/configs.md's "Every key" table: ``{section.key: default as written}``."""
    text = (ROOT / "docs" / "configs.md").read_text(encoding="utf-8")
    table = text.split("## Every key", 1)[1].split("\n\n", 2)[1]
    defaults = {}
    for row in table.splitlines()[2:]:
        keys_cell, default_cell = [cell.strip() for cell in row.strip("|").split(" | ")][:2]
        keys = re.findall(r"`([\w.]+)`", keys_cell)
        section = keys[0].split(".")[0]
        keys = [section + key if key.startswith(".") else key for key in keys]
        value = re.sub(r"\s*\(.*\)$", "", default_cell).strip("`")
        values = [part.strip() for part in value.split(", ")] if len(keys) > 1 and ", " in value else [value] * len(keys)
        defaults.update(zip(keys, values))
    return defaults


def test_the_key_tables_defaults_are_the_codes():
    table = key_table_defaults()
    assert "grad_freeze.auto_threshold" in table and "grad_freeze.cache_max_mb" in table
    for path, written in table.items():
        if "." not in path or path.split(".")[0] not in DEFAULTS:  # "level"; the loss_scale section's own table
            continue
        section, key = path.split(".", 1)
        code = DEFAULTS[section][key]
        expected = json.dumps(code) if not isinstance(code, str) else code
        assert written.replace('"', "") in (expected.replace('"', ""), "null" if code is None else expected), \
            (path, written, code)


def test_the_readme_counts_its_networks_layers_as_split_layers_does():
    """The README's example says how many layers ``mindspore.boost`` counts in its network: ``split_layers``'s."""
    block = next(block for block in code_blocks(ROOT / "README.md") if "def network():" in block.code)
    source = re.search(r"^def network\(\):\n(?:    .*\n)+", block.code, re.MULTILINE).group(0)
    namespace = {}
    exec("from mindspore import nn\n" + source, namespace)  # pylint: disable=exec-used
    stated = int(re.search(r"(\d+) layers as mindspore\.boost counts them", source).group(1))
    assert stated == len(split_layers(namespace["network"]().trainable_params()))
