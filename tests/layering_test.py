#!/usr/bin/env python3
"""The layering of Stoker's library, checked on the sources (CTest: layering), and the umbrella headers.

Each folder may include only itself and the folders before it in the dependency order

    common -> kernels -> {data, models, optim} -> parallel -> trainer -> observe -> recipe -> doctor -> {apps, python}
    common -> distributed -> parallel

(data, models and optim are siblings: none includes another, nor do apps and python; distributed includes common
only; parallel/, the data-parallel strategies, sits between the parts and the loop), and no two files may include each
other in a circle. Inside models/, the rooms weights/ (weight files: pickle, torch.save, safetensors, state dicts,
pretrained fitting, key patterns) and onnx/ (the ONNX graph, protobuf, exporters) include only themselves (and the
folders before models/): the families in models/ include both, neither includes a family or the other room. The build enforces the first as well (each folder's library target compiles
against a view of the tree holding only the folders it may include); this names the file and line.

    python3 tests/layering_test.py [SOURCE_DIR]      # exit 0: clean; 1: each violation printed
"""
import pathlib
import re
import sys

ORDER = [["common"], ["kernels"], ["data", "models", "optim", "distributed"], ["parallel"], ["trainer"], ["observe"],
         ["recipe"], ["doctor"], ["apps", "python"]]
# What a folder may include beyond the order: distributed/ sits beside data/, models/ and optim/ but
# knows nothing of kernels either (processes and collectives only).
ONLY = {"distributed": {"common", "distributed"}}
RANK = {folder: level for level, folders in enumerate(ORDER) for folder in folders}
# Rooms of a folder (<folder>/<room>/): a file in a room includes of its folder only its own room.
ROOMS = {"models": {"weights", "onnx"}}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([^"]+)"')


def sources(root):
    for folder in RANK:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in (".h", ".hpp", ".cuh", ".cpp", ".cu") and "embed_example" not in path.parts:
                yield folder, path


def room_of(folder, rel):
    """The room of `folder` that the file `rel` (models/onnx/graph.h) is in, or None."""
    parts = rel.split("/")
    return parts[1] if len(parts) > 2 and parts[1] in ROOMS.get(folder, ()) else None


def check(root):
    problems, graph = [], {}
    for folder, path in sources(root):
        rel = path.relative_to(root).as_posix()
        graph.setdefault(rel, set())
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m or m.group(1) not in RANK:
                continue
            target = m.group(1)
            allowed = (target in ONLY[folder]) if folder in ONLY else (target == folder or RANK[target] < RANK[folder])
            if not allowed and folder in ONLY:
                problems.append(f"{rel}:{number}: {folder}/ includes {target}/ ({m.group(1)}/{m.group(2)}), but "
                                f"{folder}/ may include only {', '.join(sorted(ONLY[folder]))}; pass what it needs in")
            elif not allowed:
                problems.append(f"{rel}:{number}: {folder}/ includes {target}/ ({m.group(1)}/{m.group(2)}), which "
                                f"comes {'beside' if RANK[target] == RANK[folder] else 'after'} it in the order "
                                f"{' -> '.join('{' + ', '.join(f) + '}' if len(f) > 1 else f[0] for f in ORDER)}; "
                                f"move the code to the lower folder or pass what it needs in")
            room = room_of(folder, rel)
            if room and target == folder and not m.group(2).startswith(room + "/"):
                problems.append(f"{rel}:{number}: {folder}/{room}/ includes {m.group(1)}/{m.group(2)}, but a room of "
                                f"{folder}/ ({', '.join(sorted(ROOMS[folder]))}) includes of {folder}/ only itself; "
                                f"move the code into {folder}/{room}/ or pass what it needs in")
            included = f"{m.group(1)}/{m.group(2)}"
            if (root / included).exists():
                graph[rel].add(included)
    # Circles between files: a depth-first search over the include graph. A header and its .cpp count
    # as one unit, so that a.h -> b.h and b.cpp -> a.h is a circle too; so does a unit's private
    # header <unit>_detail.h, which only the unit's own .cpp files include.
    def unit(name):
        return re.sub(r"(_detail)?\.(h|hpp|cuh|cpp|cu)$", "", name)
    units = {}
    for src, targets in graph.items():
        units.setdefault(unit(src), set()).update(unit(t) for t in targets if unit(t) != unit(src))
    state, stack = {}, []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(units.get(node, ())):
            if state.get(nxt) == 1:
                circle = stack[stack.index(nxt):] + [nxt]
                problems.append("include circle: " + " -> ".join(circle))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(units):
        if node not in state:
            visit(node)
    return problems


# Each folder's umbrella header (data/data.h) names every header of its folder and its rooms but the private
# *_detail.h.
UMBRELLAS = {"data": "data.h", "models": "models.h"}


# A header the build lists instead (models/families.h, written from CMakeLists.txt's STOKER_MODEL_FAMILIES):
# the umbrella includes that one, and so every header of the list.
GENERATED_LISTS = {"models": ("models/families.h", "STOKER_MODEL_FAMILIES")}


def listed_by_build(root, folder, text):
    """The headers of `folder` that its umbrella `text` names through a list the build writes."""
    if folder not in GENERATED_LISTS or f'#include "{GENERATED_LISTS[folder][0]}"' not in text:
        return set()
    cmake = (root / "CMakeLists.txt").read_text()
    m = re.search(r"set\(" + GENERATED_LISTS[folder][1] + r"\s([^)]*)\)", cmake)
    return {f"{name}.h" for name in m.group(1).split()} if m else set()


def check_umbrellas(root):
    problems = []
    for folder, umbrella in UMBRELLAS.items():
        text = (root / folder / umbrella).read_text()
        generated = listed_by_build(root, folder, text)
        for header in sorted((root / folder).rglob("*.h")):
            name = header.relative_to(root / folder).as_posix()
            if name == umbrella or header.name.endswith("_detail.h"):
                continue
            if f'#include "{folder}/{name}"' not in text and name not in generated:
                problems.append(f"{folder}/{umbrella}: does not include {folder}/{name}; add it (the umbrella "
                                f"header names every public header of {folder}/)")
    return problems


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    problems = check(root) + check_umbrellas(root)
    for p in problems:
        print(p)
    print(f"layering: {len(problems)} problem(s) in {sum(1 for _ in sources(root))} files")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
