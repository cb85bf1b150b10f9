#!/usr/bin/env python3
"""Checks every #include of the project's C++ files against the table of
parts in docs/architecture.md ("The parts"), so the folders keep drawing the
architecture.

The table, between the markers <!-- layering --> and <!-- /layering -->, has
a row per part: its folders (backticked, first column) and the folders it
may include (backticked, third column; "—" for none, "*" for any). A file
belongs to the part of the longest folder its path starts with; a file in no
part is an error too, so a new folder has to be placed in the table.

An include names a project file when its path exists from the source root
("engine/shard.hpp"), is a public header ("fusee/engine.hpp", in
sdk/include/), or exists beside the including file. Anything else is a
system or library header and is not checked.

It also holds every source file to LINES_MAX lines, unless the list
between <!-- size-exceptions --> and <!-- /size-exceptions --> in the same
document names it ("- `path`: why"); a listed file back within the limit is
refused too, so the list only shrinks by being kept.

Usage: layering.py SOURCE_ROOT. Exits 1 naming every include that crosses a
forbidden edge and every file over the limit, 2 when the table cannot be
read.
"""
import pathlib
import re
import sys

DOC = "docs/architecture.md"
# A file a newcomer can read as one idea (docs/architecture.md, "Where to find").
LINES_MAX = 800
SOURCE_SUFFIXES = {".cpp", ".hpp", ".cc", ".h"}
# Not the project's code: build trees, downloaded subprojects, tools.
SKIPPED_TOP = {"subprojects", "node_modules", ".git"}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
TICKED = re.compile(r"`([^`]+)`")


class TableError(Exception):
    pass


def read_table(root):
    text = (root / DOC).read_text(encoding="utf-8")
    start = text.find("<!-- layering -->")
    end = text.find("<!-- /layering -->")
    if start < 0 or end < start:
        raise TableError(f"{DOC} has no <!-- layering --> ... <!-- /layering --> table")
    parts = []  # (name, folders, allowed folders or None for any)
    for line in text[start:end].splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue  # the markers, the header, the separator
        folders = TICKED.findall(cells[0])
        allowed = None if cells[2] == "*" else TICKED.findall(cells[2])
        if not folders or any(not folder.endswith("/") for folder in folders):
            raise TableError(f"{DOC}: a part's folders end with '/': {line}")
        parts.append((folders[0], folders, allowed))
    if not parts:
        raise TableError(f"{DOC}: the layering table has no rows")
    owner = {}
    for name, folders, _ in parts:
        for folder in folders:
            if folder in owner:
                raise TableError(f"{DOC}: {folder} is in two parts")
            owner[folder] = name
    rules = {}
    for name, _, allowed in parts:
        if allowed is None:
            rules[name] = None
            continue
        unknown = [folder for folder in allowed if folder not in owner]
        if unknown:
            raise TableError(f"{DOC}: {name} may include {', '.join(unknown)}, which is no part's folder")
        rules[name] = {owner[folder] for folder in allowed}
    return owner, rules


def read_size_exceptions(root):
    text = (root / DOC).read_text(encoding="utf-8")
    start = text.find("<!-- size-exceptions -->")
    end = text.find("<!-- /size-exceptions -->")
    if start < 0 or end < start:
        raise TableError(f"{DOC} has no <!-- size-exceptions --> ... <!-- /size-exceptions --> list")
    listed = set()
    for line in text[start:end].splitlines():
        line = line.strip()
        if line.startswith("- "):
            ticked = TICKED.findall(line)
            if ticked:
                listed.add(ticked[0])
    return listed


def part_of(path, owner):
    """The part whose folder is the longest prefix of `path`, or None."""
    best = None
    for folder, name in owner.items():
        if path.startswith(folder) and (best is None or len(folder) > len(best[0])):
            best = (folder, name)
    return best[1] if best else None


def project_sources(root):
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        top = relative.parts[0]
        if top in SKIPPED_TOP or top.startswith("build") or top.startswith("bench-data"):
            continue
        if path.suffix in SOURCE_SUFFIXES and path.is_file():
            yield relative.as_posix()


def resolve(root, including, target):
    if target.startswith("fusee/") and (root / "sdk/include" / target).is_file():
        return "sdk/include/" + target
    if (root / target).is_file():
        return target
    beside = (root / including).parent / target
    if beside.is_file():
        return beside.resolve().relative_to(root.resolve()).as_posix()
    return None


def main():
    if len(sys.argv) != 2:
        print("usage: layering.py SOURCE_ROOT", file=sys.stderr)
        return 2
    root = pathlib.Path(sys.argv[1])
    try:
        owner, rules = read_table(root)
        size_exceptions = read_size_exceptions(root)
    except (OSError, TableError) as error:
        print(f"layering: {error}", file=sys.stderr)
        return 2
    problems = []
    files = crossings = 0
    for source in project_sources(root):
        files += 1
        part = part_of(source, owner)
        if part is None:
            problems.append(f"{source}: in no part of the table in {DOC}; add its folder there")
            continue
        lines = (root / source).read_text(encoding="utf-8", errors="replace").splitlines()
        if len(lines) > LINES_MAX and source not in size_exceptions:
            problems.append(f"{source}: {len(lines)} lines, over {LINES_MAX}: split it by concern, or name it "
                            f"among the size exceptions in {DOC}")
        elif len(lines) <= LINES_MAX and source in size_exceptions:
            problems.append(f"{source}: {len(lines)} lines, within {LINES_MAX}: take it off the size exceptions "
                            f"in {DOC}")
        for number, line in enumerate(lines, 1):
            match = INCLUDE.match(line)
            if not match:
                continue
            target = resolve(root, source, match.group(2))
            if target is None:
                continue
            target_part = part_of(target, owner)
            if target_part is None or target_part == part:
                continue
            crossings += 1
            allowed = rules[part]
            if allowed is not None and target_part not in allowed:
                problems.append(f"{source}:{number}: includes {target}: {part} may not include {target_part} "
                                f"(the table in {DOC})")
    for problem in problems:
        print(f"layering: {problem}", file=sys.stderr)
    print(f"layering: {files} files, {crossings} includes between parts, {len(problems)} refused")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
