"""The documentation works as written (tests/docs_check.py): every complete python block of README.md and
docs/*.md runs in a fresh process from an empty directory, every relative link and heading anchor resolves, no page
links or cites a file outside the repository, every shell block says what runs it; the README stays short and CI
runs its test command; no page names a commit (the results page too); and the checker itself fails a
broken example, reports a broken link, reports a link or a citation outside the repository, and finds a commit."""
import pytest

from tests.docs_check import code_blocks, commit_id_problems, pages, problems, run_block
from tests.launch import ROOT

BLOCK_TIMEOUT = 180  # seconds; each block takes a few on 2 idle cores, the margin is for a loaded machine
README_LINES = 200
COMPLETE = [block for page in pages(ROOT) for block in code_blocks(page) if block.runs]


@pytest.mark.slow  # a subprocess per example
@pytest.mark.parametrize("block", COMPLETE, ids=lambda block: block.name)
def test_example_runs_as_written(block, tmp_path):
    result = run_block(block, ROOT, tmp_path, BLOCK_TIMEOUT)
    assert result.returncode == 0, f"{block.name} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"


def test_links_anchors_citations_and_block_markers_resolve():
    assert problems(pages(ROOT), ROOT) == []


def test_pages_name_no_commit():
    """README.md and the docs pages, the results page too, say what is true today: no commit id on them (STYLE rule
    21); the results files under bench/results/ carry each figure's commit."""
    assert [problem for page in pages(ROOT) for problem in commit_id_problems(page)] == []


def test_the_commit_check_finds_a_commit_and_nothing_else(tmp_path):
    """A word of 7 to 40 hex digits with a digit and a letter is a commit, in prose, in an anchor or in code; a
    figure, a hex word without a digit or a letter, a hex literal, a short or a longer word are not."""
    page = tmp_path / "page.md"
    page.write_text("Measured at 4a1b85b, 1.54x.\n[the record](benchmarks.md#files-4a1b85b-to-b5b475a)\n"
                    "`git show f1f11c3:docs/x.md`\nNot: deadbeef, 12345678, 0x1f2e3d4c5b, abc1234x, 4a1b85, "
                    "1e-5, a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4e5f6.\n", encoding="utf-8")
    found = commit_id_problems(page)
    assert [problem.split(": names commit ")[1].split(";")[0] for problem in found] == [
        "4a1b85b", "4a1b85b", "b5b475a", "f1f11c3"], found
    assert found[0].startswith("page.md:1: ")


def test_readme_is_short_and_ci_runs_its_test_command():
    """At most 200 lines; `.ci/run` ends with exactly the README's second command (after the same install)."""
    readme = ROOT / "README.md"
    assert len(readme.read_text(encoding="utf-8").splitlines()) <= README_LINES
    commands = [block.code.strip() for block in code_blocks(readme) if block.language == "bash"]
    assert commands[1] == "python -m pytest -q"
    assert (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1] == commands[1]


SAMPLE = """# Sample

## A section

Good: [the section](#a-section), [this page](sample.md#a-section), [the other page](other.md).
Broken: [no file](missing.md), [no heading](other.md#nowhere), [no heading here](#nowhere), [a link that
wraps](elsewhere.md). Not links: `[code](missing.md)`.

```python
print(undefined_name)
```

<!-- excerpt: complete version in nowhere/train.py -->
```python
model.train(10, dataset)
```

<!-- excerpt: complete version in other.md -->
```python
model.train(10, dataset)
```

```bash
python -m boost_cells.plot run.jsonl
```

<!-- not run by the tests: a sample -->
```bash
msrun examples/train.py
```

```
untagged
```

<!-- not run by the tests: a comment -->
```bash
# a comment that is not a heading: [not a link](missing.md)
```
"""


@pytest.mark.slow  # a subprocess
def test_the_checker_fails_a_broken_example_and_reports_a_broken_link(tmp_path):
    """On a sample page: the block with a NameError fails when run; each broken link, each bad marker and the
    untagged fence is reported once; the good links, the good excerpt and what sits inside code blocks are not."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "other.md").write_text("# Other\n", encoding="utf-8")
    page = docs / "sample.md"
    page.write_text(SAMPLE, encoding="utf-8")
    (tmp_path / "configs").mkdir()

    found = problems([page], docs)
    assert len(found) == 7, found
    for words in ("link missing.md: no file", "link other.md#nowhere: no heading", "link #nowhere: no heading",
                  "sample.md:6: link elsewhere.md: no file",
                  "nowhere/train.py does not exist", "bash block: say before it", "untagged block"):
        assert sum(words in problem for problem in found) == 1, (words, found)

    blocks = code_blocks(page)
    assert [block.runs for block in blocks if block.language == "python"] == [True, False, False]
    run = tmp_path / "run"
    run.mkdir()
    result = run_block(blocks[0], tmp_path, run, BLOCK_TIMEOUT)
    assert result.returncode != 0 and "NameError: name 'undefined_name' is not defined" in result.stderr


OUTSIDE = """# Outside

Links: [a sibling](other.md), [above the root](../../outside.md), [an absolute path](/etc/hostname), [a local
file](file:///etc/hostname), [upstream](https://example.com/project/src/module.py).
Cited: as DESIGN.md section 7 measured; see `STYLE.md`; `tools/missing.py`; /home/user/notes.md.
Not cited: [`project/src/module.py`](https://example.com/project/src/module.py) upstream, https://example.com/a.py,
`other.md`, docs/other.md, `sub/deep.py`, deep.py, [the page](../README.md), `overflow_report="my_output.json"`,
written.json, the data in `run.jsonl`, `boost_cells.grad_freeze`.

<!-- excerpt: complete version in tools/absent.py -->
```python
model.train(10, dataset)
```

```python
with open("written.json", "w", encoding="utf-8") as file:
    file.write("{}")
```
"""


def test_the_checker_reports_links_and_citations_outside_the_repository(tmp_path):
    """On a sample page of a sample repository: each link that leaves the repository (above its root, an absolute
    path, a file: URL) and each mention of a .md/.py/.json file not in it (bare, in inline code, an absolute path) is
    reported once; a file of the repository (by path from the page or the root, by the end of its path, by name), a
    link to a URL and its text, a quoted value, a file the page's code writes, other suffixes and module names are
    not; the excerpt marker's missing file is reported as such, not as a citation."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "src" / "sub").mkdir(parents=True)
    (tmp_path / "README.md").write_text("# Readme\n", encoding="utf-8")
    (tmp_path / "docs" / "other.md").write_text("# Other\n", encoding="utf-8")
    (tmp_path / "src" / "sub" / "deep.py").write_text("", encoding="utf-8")
    page = tmp_path / "docs" / "outside.md"
    page.write_text(OUTSIDE, encoding="utf-8")

    found = problems([page], tmp_path)
    assert len(found) == 8, found
    for words in ("outside.md:3: link ../../outside.md: ", "link /etc/hostname: an absolute path",
                  "outside.md:3: link file:///etc/hostname: a file outside the repository",
                  "outside.md:5: mentions DESIGN.md: no such file", "mentions STYLE.md: no such file",
                  "mentions tools/missing.py: no such file", "mentions /home/user/notes.md: a file outside",
                  "tools/absent.py does not exist"):
        assert sum(words in problem for problem in found) == 1, (words, found)
    assert not [problem for problem in found if "module.py" in problem or "other.md" in problem
                or "deep.py" in problem or ".json" in problem or "README.md" in problem]
