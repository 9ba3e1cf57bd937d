#!/usr/bin/env python3
"""The layout rules of docs/adr and issue 16, checked on the sources (run by ctest, label unit).

1. Layers: sim/ includes nothing of topologies/ or models/; topologies/ nothing of models/.
2. No include cycle between the folders of models/ (a folder's files may include another
   folder's only if that folder does not, directly or through others, include it back).
3. No function in models/ longer than MAX_FUNCTION_LINES lines, from its signature's opening
   brace to its closing one (lambdas and local classes count in the function that holds them).

Functions are found by matching braces in the source with comments, strings and character
literals blanked out: a brace opens a function body when it follows a parameter list (`)` and
then only qualifiers, a trailing return type or a constructor's initialiser list) at namespace or
class level. This is a heuristic for this code base's style (clang-format, no macros that open
bodies), not a C++ parser; tests/architecture/check_layout_test.sh feeds it known cases.

Usage: check_layout.py SOURCE_DIR   (exit 0 when every rule holds, 1 with the breaches listed)
"""
import os
import re
import sys

MAX_FUNCTION_LINES = 100  # issue 31: no function in models/ over 100 lines
LAYERS = {"sim": ("topologies/", "models/"), "topologies": ("models/",)}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def blank_comments_and_literals(src):
    """The source with comments, string and character literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif src.startswith('R"', i) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', src[i:])
            if not m:
                out.append(src[i])
                i += 1
                continue
            end = ")" + m.group(1) + '"'
            j = src.find(end, i)
            j = n if j < 0 else j + len(end)
        elif src[i] == '"' or (src[i] == "'" and not (i > 0 and src[i - 1].isalnum())):
            quote, j = src[i], i + 1
            while j < n and src[j] != quote and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            j = min(j + 1, n)
        else:
            out.append(src[i])
            i += 1
            continue
        out.append("".join(c if c == "\n" else " " for c in src[i:j]))
        i = j
    return "".join(out)


FUNCTION_HEAD = re.compile(
    r"\)\s*(const\s*)?(noexcept\s*)?(override\s*)?(final\s*)?(->\s*[\w:<>,\s*&]+)?$")
INITIALISER_LIST = re.compile(r"\)\s*:\s*[\w:]+\s*[({][\s\S]*[)}]$")
CONTROL = re.compile(r"\b(if|for|while|switch|catch)\s*\([^()]*(\([^()]*\)[^()]*)*\)\s*$")
SCOPE_HEAD = re.compile(r"\b(namespace|class|struct|union|enum)\b[^;{}()]*$")


AFTER_PARAMETERS = re.compile(r"^\s*((const|noexcept|override|final)\s*)*(->[^;{}]*)?$|^\s*:")


def function_name(head):
    """The name before the parameter list in `head`, the text before a function body's brace."""
    groups, depth, opened = [], 0, None
    for k, c in enumerate(head):
        if c == "(":
            if depth == 0:
                opened = k
            depth += 1
        elif c == ")" and depth > 0:
            depth -= 1
            if depth == 0:
                groups.append((opened, k))
    for opened, closed in reversed(groups):
        if AFTER_PARAMETERS.search(head[closed + 1:]):
            m = re.search(r"([A-Za-z_~][\w:~]*(<[^<>()]*>)?|operator\S+)\s*$", head[:opened])
            return m.group(1) if m else "?"
    return "?"


def functions(path):
    """(first line, lines, name) of every function body defined at namespace or class level."""
    src = blank_comments_and_literals(open(path, encoding="utf-8").read())
    found, stack, line = [], [], 1
    for i, c in enumerate(src):
        if c == "\n":
            line += 1
        elif c == "{":
            kind = "block"
            if all(k == "scope" for k, _, _ in stack):
                before = src[max(0, i - 400):i].rstrip()
                if SCOPE_HEAD.search(before):
                    kind = "scope"
                elif (FUNCTION_HEAD.search(before) or INITIALISER_LIST.search(before)) and not CONTROL.search(before):
                    kind = "function"
                elif before.endswith(("=", ",", "(", "return")) or re.search(r"[\w>\]]$", before):
                    kind = "block"  # an initialiser, not a body
                else:
                    kind = "scope"  # extern "C", an anonymous namespace's body, ...
            name = function_name(src[max(0, i - 400):i]) if kind == "function" else ""
            stack.append((kind, line, name))
        elif c == "}" and stack:
            kind, start, name = stack.pop()
            if kind == "function":
                found.append((start, line - start + 1, name))
    return found


def sources(root, folder):
    for dirpath, _, files in os.walk(os.path.join(root, folder)):
        for f in sorted(files):
            if f.endswith((".cpp", ".hpp")):
                yield os.path.join(dirpath, f)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    breaches = []
    for layer, forbidden in LAYERS.items():
        for path in sources(root, layer):
            for inc in INCLUDE.findall(open(path, encoding="utf-8").read()):
                if inc.startswith(forbidden):
                    breaches.append(f"{os.path.relpath(path, root)}: includes {inc} (an upper layer)")
    # Folder graph of models/: an edge a -> b when a file of a includes a header of b.
    edges = {}
    for path in sources(root, "models"):
        folder = os.path.dirname(os.path.relpath(path, root))
        for inc in INCLUDE.findall(open(path, encoding="utf-8").read()):
            if inc.startswith("models/"):
                target = os.path.dirname(inc)
                if target != folder:
                    edges.setdefault(folder, {}).setdefault(target, os.path.relpath(path, root))
    for a in sorted(edges):
        for b in sorted(edges[a]):
            seen, todo = set(), [b]
            while todo:
                x = todo.pop()
                if x == a:
                    breaches.append(f"include cycle between {a}/ and {b}/ ({edges[a][b]} includes {b}/, "
                                    f"and {b}/ reaches {a}/ back)")
                    break
                if x not in seen:
                    seen.add(x)
                    todo.extend(edges.get(x, {}))
    for path in sources(root, "models"):
        for start, lines, name in functions(path):
            if lines > MAX_FUNCTION_LINES:
                breaches.append(f"{os.path.relpath(path, root)}:{start}: {name} is {lines} lines "
                                f"(at most {MAX_FUNCTION_LINES}: split it into its steps)")
    for b in breaches:
        print(b)
    if breaches:
        return 1
    counted = sum(len(functions(p)) for p in sources(root, "models"))
    print(f"layout holds: layers, no include cycle between the {len(edges)} folders of models/ that include "
          f"others, {counted} functions in models/ of at most {MAX_FUNCTION_LINES} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
