"""Checks of the documentation (README.md and docs/*.md): its code blocks and its relative links.

Every fenced code block says its language. A ``python`` block is a complete program, run as written in a fresh
process, unless the line before it marks it as an excerpt and names the file that holds the complete version::

    <!-- excerpt: complete version in examples/train.py -->

A shell block (``bash``, ``sh``, ``shell``, ``console``) is never run from the docs: the line before it says
which test or script runs it, or why nothing does::

    <!-- run by tests/test_monitor.py -->
    <!-- not run by the tests: a 40-minute benchmark -->

Every relative link (``[text](path)``, ``[text](path#anchor)``, ``[text](#anchor)``, images too) must name an
existing file and, with an anchor, a heading of that file by GitHub's slug rules.

A page cites only what a reader of the repository can open: no link to a file outside the repository (a relative
path that leaves its root, an absolute path, a ``file:`` URL), and no mention of a ``.md``, ``.py`` or ``.json`` file
that is not in it (``DESIGN.md``, ``notes/plan.py``), bare or in inline code. A mentioned name is in the repository
when it is a path from the root or from the page's folder, the end of a path in the repository
(``freezing/schedule/plan.py``), or, without a folder, the name of one of its files (``plan.py``). Not citations, so not
checked: another project's file given as the text of a link to where it lives (``[`mindcv/utils/x.py`](https://...)``);
a name in quotes (a value of the code around it: ``overflow_report="overflow.json"``); a name a code block of the
same page uses (the file its example writes or runs: ``my_script.py``); an excerpt marker's file (checked above).
"""
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SHELLS = {"bash", "sh", "shell", "console"}
EXCERPT = re.compile(r"<!-- excerpt: complete version in (\S+?)(?:[ ,;:].*)? -->")
RUN_BY = re.compile(r"<!-- run by (\S.*\S) -->")
NOT_RUN = re.compile(r"<!-- not run by the tests: (\S.*\S) -->")
FENCE = re.compile(r"^ {0,3}(`{3,})\s*([\w+-]*)")
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$")
CITED_KINDS = ("md", "py", "json")
MENTION = re.compile(r"(?<![\w./~-])((?:~?/)?(?:[\w.-]+/)*[\w.-]*\w\.(?:" + "|".join(CITED_KINDS)
                     + r"))(?![\w-]|\.\w)")
URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+")
QUOTED = re.compile(r"([\"'])[^\"'\s]+\1")
COMMIT_ID = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")  # a word that looks like a git hash
SKIPPED_FOLDERS = {"__pycache__", "node_modules"}  # besides hidden folders and *.egg-info: not the repository's files


@dataclass(frozen=True)
class Block:
    """A fenced code block: its page, the line of its opening fence, its language, its code, and the HTML comment
    on the line before it (or "")."""

    page: Path
    line: int
    language: str
    code: str
    marker: str

    @property
    def name(self):
        return f"{self.page.name}:{self.line}"

    @property
    def runs(self):
        """Whether the docs test runs it: a python block not marked as an excerpt."""
        return self.language == "python" and not self.marker.startswith("<!-- excerpt:")


def prose_lines(text):
    """(line number, line) of ``text`` outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)
        elif fence is not None and line.strip().startswith(fence) and not line.strip().strip("`"):
            fence = None
        elif fence is None:
            yield number, line


def code_blocks(page):
    """The fenced code blocks of the Markdown file ``page``, in order."""
    blocks, lines = [], Path(page).read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if not match:
            index += 1
            continue
        fence, start = match.group(1), index
        index += 1
        while index < len(lines) and not (lines[index].strip().startswith(fence)
                                          and not lines[index].strip().strip("`")):
            index += 1
        before = next((line.strip() for line in reversed(lines[:start]) if line.strip()), "")
        blocks.append(Block(Path(page), start + 1, match.group(2).lower(), "\n".join(lines[start + 1:index]) + "\n",
                            before if before.startswith("<!--") else ""))
        index += 1
    return blocks


def slug(heading):
    """GitHub's anchor for a heading's text: markup dropped, lower case, every character but letters, digits,
    ``_``, ``-`` and spaces removed, spaces made hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page):
    """Every heading anchor of the Markdown file ``page``; a repeated heading gets ``-1``, ``-2``, ... as on
    GitHub."""
    seen, result = {}, set()
    for _, line in prose_lines(Path(page).read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            result.add(base if count == 0 else f"{base}-{count}")
    return result


def _prose(page):
    """The prose of the Markdown file ``page`` as one string, with the lines of its code blocks blank (so line
    numbers hold) and inline code blanked."""
    lines = dict(prose_lines(Path(page).read_text(encoding="utf-8")))
    return "\n".join(lines.get(number, "") for number in range(1, max(lines, default=0) + 1))


def _inside(path, root):
    """Whether the resolved ``path`` lies in the folder ``root``."""
    try:
        Path(path).resolve().relative_to(Path(root).resolve())
    except ValueError:
        return False
    return True


def link_problems(page, root=None):
    """What is wrong with the relative links of the Markdown file ``page`` (a link's text may wrap lines): one line
    per missing file or heading and, given the repository's ``root``, per link to a file outside it (a relative
    path that leaves ``root``, an absolute path, a ``file:`` URL)."""
    page = Path(page)
    problems = []
    prose = re.sub(r"`[^`]*`", lambda code: re.sub(r"[^\n]", " ", code.group()), _prose(page))  # code is no link
    for match in LINK.finditer(prose):
        target = match.group(1)
        path, _, anchor = target.partition("#")
        where = f"{page.name}:{prose.count(chr(10), 0, match.start()) + 1}: link {target}"
        if target.lower().startswith("file:"):
            problems.append(f"{where}: a file outside the repository (a file: URL); link inside the repository")
            continue
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        if path.startswith(("/", "~")):
            problems.append(f"{where}: an absolute path, outside the repository; link relative to the page")
            continue
        file = (page.parent / path).resolve() if path else page.resolve()
        if root is not None and not _inside(file, root):
            problems.append(f"{where}: {file} is outside the repository; link inside it or state the fact")
        elif not file.exists():
            problems.append(f"{where}: no file {file}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            problems.append(f"{where}: no heading with anchor #{anchor} in {file.name}")
    return problems


def repository_files(root):
    """The paths (``/``-separated, from ``root``) of the repository's files: every file under ``root`` but those in
    hidden folders (``.git``, ``.venv``), ``__pycache__``, ``node_modules`` and ``*.egg-info``."""
    root, found = Path(root), set()
    for folder, folders, files in os.walk(root):
        folders[:] = [name for name in folders if not name.startswith(".") and name not in SKIPPED_FOLDERS
                      and not name.endswith(".egg-info")]
        found.update((Path(folder) / name).relative_to(root).as_posix() for name in files)
    return found


def _in_repository(name, page, root, files):
    """Whether the mentioned file ``name`` (from ``page``) is one of the repository's ``files`` (see the module
    docstring); None when it lies outside the repository's root."""
    if name.startswith(("/", "~")):
        return None
    for base in (Path(page).parent, Path(root)):
        candidate = (base / name).resolve()
        if candidate.exists() and _inside(candidate, root):
            return True
    if ".." in Path(name).parts:
        return None if not _inside(Path(page).parent / name, root) else False
    if "/" not in name:
        return any(path.rsplit("/", 1)[-1] == name for path in files)
    return any(path == name or path.endswith("/" + name) for path in files)


def _link_text(link):
    """What of a link ``link`` (a ``LINK`` match) can cite a file: a local link's text; nothing of a link to a URL
    (its line breaks stay, so that line numbers hold)."""
    if re.match(r"[a-z][a-z0-9+.-]*:", link.group(1)):
        return "\n" * link.group().count("\n")
    return link.group()[:link.start(1) - link.start() - 2]


def mention_problems(page, root, files=None):
    """The ``.md``, ``.py`` and ``.json`` files the Markdown file ``page`` mentions in its prose (bare or in inline
    code) that are not in the repository at ``root`` (``files``: its ``repository_files``), one line each; see the
    module docstring for what is not a citation."""
    page, root = Path(page), Path(root)
    files = repository_files(root) if files is None else files
    used = {name for block in code_blocks(page) for name in MENTION.findall(block.code)}
    prose = LINK.sub(_link_text, _prose(page))
    prose = EXCERPT.sub("", URL.sub("", prose))
    prose = QUOTED.sub(lambda quoted: " " * len(quoted.group()), prose)
    problems = []
    for match in MENTION.finditer(prose):
        name = match.group(1)
        if name in used:
            continue
        inside = _in_repository(name, page, root, files)
        if inside:
            continue
        where = f"{page.name}:{prose.count(chr(10), 0, match.start()) + 1}: mentions {name}"
        if inside is None:
            problems.append(f"{where}: a file outside the repository; state the fact or cite a file of the repository")
        else:
            problems.append(f"{where}: no such file in the repository; state the fact, cite a file of the repository, "
                            "or link another project's file to where it lives")
    return problems


def marker_problems(block, root):
    """What is wrong with ``block``'s marking: a shell block needs "run by" or "not run by the tests", an excerpt
    must name an existing file, and a block needs a language."""
    where = f"{block.name}: {block.language or 'untagged'} block"
    if not block.language:
        return [f"{where}: give the fence a language (python, bash, text, ...)"]
    if block.language == "python" and block.marker.startswith("<!-- excerpt:"):
        match = EXCERPT.fullmatch(block.marker)
        if match is None:
            return [f"{where}: write the excerpt marker as <!-- excerpt: complete version in PATH -->"]
        if not (root / match.group(1)).exists():
            return [f"{where}: the complete version {match.group(1)} does not exist"]
    if block.language in SHELLS and not (RUN_BY.fullmatch(block.marker) or NOT_RUN.fullmatch(block.marker)):
        return [f"{where}: say before it <!-- run by tests/... --> or <!-- not run by the tests: why -->"]
    return []


def problems(pages, root):
    """Every link, citation and marker problem of the Markdown ``pages`` (paths) of the repository at ``root``."""
    found, files = [], repository_files(root)
    for page in pages:
        found += link_problems(page, root)
        found += mention_problems(page, root, files)
        found += [problem for block in code_blocks(page) for problem in marker_problems(block, Path(root))]
    return found


def commit_id_problems(page):
    """The commit ids the Markdown file ``page`` names, one line each: a word of 7 to 40 lower-case hex digits with at
    least one digit and one letter (``4a1b85b``), anywhere on the page, in a link's anchor or a code block too. A
    page says what is true today; how a figure came to be, commits included, lives in the results files under
    bench/results/ and in git."""
    return [f"{Path(page).name}:{number}: names commit {word}; say what is true today, and keep the history in "
            "the results files or git"
            for number, line in enumerate(Path(page).read_text(encoding="utf-8").splitlines(), 1)
            for word in COMMIT_ID.findall(line)]


def run_block(block, root, directory, timeout):
    """Run the python ``block`` as a user who copied it would: as a file of its own in the empty ``directory``,
    beside a copy of the repository's ``configs/`` (the pages say their examples run from the repository root),
    in a fresh interpreter that imports boost_cells from ``root``. Returns the ``CompletedProcess``."""
    directory = Path(directory)
    shutil.copytree(Path(root) / "configs", directory / "configs")
    script = directory / f"{block.page.stem}_{block.line}.py"
    script.write_text(block.code, encoding="utf-8")
    return subprocess.run([sys.executable, script.name], cwd=directory, capture_output=True, text=True,
                          timeout=timeout, env=block_environment(root), check=False)


def block_environment(root):
    """The environment of a run block: this one, with ``root`` first on PYTHONPATH and MindSpore's C++ log quiet."""
    paths = [str(root), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "GLOG_v": "3"}


def pages(root):
    """The documentation's Markdown files: README.md and docs/*.md."""
    return [Path(root) / "README.md", *sorted((Path(root) / "docs").glob("*.md"))]
