#!/usr/bin/env python3
"""Checks that the docs say what the code does, where a mismatch can be found mechanically.

1. Enums: docs/engine.md's table "Enums: C++ names and JSON spellings" lists every public enum of
   the engine's headers (include/zenflow/engine/*.hpp, plus channel_norm and channel_layout, which
   the engine's interface uses) with exactly its values, in order, and each JSON spelling is the
   one the JSON reader accepts (the json_enum maps of engine/detail/config/config_json.hpp), which is
   also what to_string() returns.
2. Config keys: docs/config.md's tables list exactly the keys the JSON reader accepts: DeepSpeed's
   zenflow block (deepspeed_zenflow_keys), zenflow_ext (extension_keys), optimizer.params
   (adam_param_keys); those lists match the names the reader's branches test; and each enum key's
   "accepted" column lists exactly the spellings the reader accepts.
3. Links: every relative link in README.md, docs/*.md and bench/results/*/NOTES.md points at an
   existing file, and a link to a heading of a Markdown file (#anchor) at an existing heading.

Everything is read from the sources (headers parsed as text): nothing to build. Exit 1 naming
each mismatch.

    python3 tests/docs/check_docs.py [REPO_ROOT]
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
errors = []


def fail(msg):
    errors.append(msg)


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def strip_comments(code):
    code = re.sub(r"/\*.*?\*/", " ", code, flags=re.S)
    return re.sub(r"//[^\n]*", " ", code)


# ---------------------------------------------------------------------------------------------
# The code

def enums_in(rel):
    """{name: [values]} of the `enum class` definitions of one header."""
    code = strip_comments(read(rel))
    out = {}
    for m in re.finditer(r"enum\s+class\s+(\w+)\s*(?::\s*[\w:]+\s*)?\{([^}]*)\}", code):
        values = [v.split("=")[0].strip() for v in m.group(2).split(",")]
        out[m.group(1)] = [v for v in values if v]
    return out


def public_enums():
    headers = sorted("include/zenflow/engine/" + f for f in os.listdir(os.path.join(ROOT, "include/zenflow/engine"))
                     if f.endswith(".hpp"))
    # The public headers that are thin hold their declarations in a detail header of their own.
    headers += ["include/zenflow/engine/detail/config/config_decl.hpp",
                "include/zenflow/engine/detail/checkpoint_file/checkpoint_file_decl.hpp",
                "include/zenflow/engine/detail/planner/plan_decl.hpp"]
    headers += ["include/zenflow/math/norms.hpp", "include/zenflow/core/views.hpp"]
    enums = {}
    for h in headers:
        for name, values in enums_in(h).items():
            if name in enums:
                fail(f"enum {name} is defined twice ({h})")
            enums[name] = values
    for name in ("channel_norm", "channel_layout"):
        if name not in enums:
            fail(f"enum {name} not found in its header: update tests/docs/check_docs.py")
    return enums


def branches(code):
    """[(name, body)] for each `name == "X")` test of a reader function, body up to the next one."""
    hits = list(re.finditer(r'name\s*==\s*"(\w+)"\s*\)', code))
    out = []
    for i, m in enumerate(hits):
        end = hits[i + 1].start() if i + 1 < len(hits) else len(code)
        out.append((m.group(1), code[m.end():end]))
    return out


def function_body(code, signature_regex):
    m = re.search(signature_regex, code)
    if not m:
        return None
    i = code.index("{", m.end())
    depth = 0
    for j in range(i, len(code)):
        depth += {"{": 1, "}": -1}.get(code[j], 0)
        if depth == 0:
            return code[i:j + 1]
    return None


def string_list(code, name):
    m = re.search(r"\b" + name + r"\[\]\s*=\s*\{([^}]*)\}", code)
    if not m:
        fail(f"list {name} not found in engine/detail/config/config_keys.hpp: update tests/docs/check_docs.py")
        return []
    return re.findall(r'"([^"]*)"', m.group(1))


def json_enum_maps(code):
    """{(function, key): (enum, [(spelling, value)])} for every json_enum<E>(...) of the reader."""
    out = {}
    for fn in ("read_extension_key", "read_zenflow_block"):
        body = function_body(code, r"\b" + fn + r"\s*\(")
        if body is None:
            fail(f"function {fn} not found in engine/detail/config/config_json.hpp: update tests/docs/check_docs.py")
            continue
        for key, branch in branches(body):
            m = re.search(r"json_enum<(\w+)>", branch)
            if m:
                pairs = re.findall(r'\{\s*"([^"]+)"\s*,\s*(\w+)::(\w+)\s*\}', branch)
                if any(e != m.group(1) for _, e, _ in pairs):
                    fail(f"{fn}: the map of key {key} mixes enums")
                out[key] = (m.group(1), [(s, v) for s, _, v in pairs])
    return out


def to_string_maps(code):
    """{enum: {value: spelling}} from the `to_string(E v)` switch statements."""
    out = {}
    for m in re.finditer(r"to_string\((\w+)\s+\w+\)\s*noexcept\s*\{", code):
        body = function_body(code[m.start():], r"noexcept\s*")
        out[m.group(1)] = dict(re.findall(r"case\s+\w+::(\w+)\s*:\s*return\s+\"([^\"]*)\"", body or ""))
    return out


# ---------------------------------------------------------------------------------------------
# The docs

def section(md, heading_regex, doc):
    """The text from a heading matching heading_regex to the next heading of the same or a higher level."""
    lines = md.split("\n")
    for i, line in enumerate(lines):
        m = re.match(r"(#+)\s", line)
        if m and re.search(heading_regex, line):
            level = len(m.group(1))
            out = []
            for other in lines[i + 1:]:
                n = re.match(r"(#+)\s", other)
                if n and len(n.group(1)) <= level:
                    break
                out.append(other)
            return "\n".join(out)
    fail(f"{doc}: no heading matching {heading_regex!r}")
    return ""


def table_rows(text):
    """The cells of each body row of the Markdown tables in text (header and rule rows left out)."""
    rows = []
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if not line.startswith("|"):
            continue
        if re.match(r"^\|[\s\-|:]+\|$", line):
            continue
        if i + 1 < len(lines) and re.match(r"^\|[\s\-|:]+\|$", lines[i + 1]):
            continue  # a header row
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        rows.append(cells)
    return rows


def check_enums():
    enums = public_enums()
    doc = "docs/engine.md"
    rows = table_rows(section(read(doc), r"Enums: C\+\+ names and JSON spellings", doc))
    documented = {}
    for cells in rows:
        names = re.findall(r"`([^`]*)`", cells[0])
        if not names or "::" not in names[0]:
            fail(f"{doc}: enum row {cells[0]!r} does not start with `enum::value`")
            continue
        enum, first = names[0].split("::", 1)
        values = [first] + [n[2:] if n.startswith("::") else n for n in names[1:]]
        spellings = re.findall(r'`"([^"]*)"`|"([^"]*)"', cells[1]) if len(cells) > 1 else []
        spellings = [a or b for a, b in spellings]
        key = re.search(r"\(`([\w.]+)`\)\s*$", cells[1]) if len(cells) > 1 else None
        documented[enum] = (values, spellings, key.group(1) if key else None)
    for enum in sorted(set(enums) - set(documented)):
        fail(f"{doc}: enum {enum} ({', '.join(enums[enum])}) is missing from the enum table")
    for enum in sorted(set(documented) - set(enums)):
        fail(f"{doc}: the enum table lists {enum}, which is not a public enum of the engine's headers")
    code = strip_comments(read("include/zenflow/engine/detail/config/config_json.hpp"))
    maps = json_enum_maps(code)
    by_enum = {e: (key, pairs) for key, (e, pairs) in maps.items()}
    to_strings = to_string_maps(strip_comments(read("include/zenflow/engine/detail/config/config_impl.hpp")))
    for enum, (values, spellings, key) in sorted(documented.items()):
        if enum not in enums:
            continue
        if values != enums[enum]:
            missing = [v for v in enums[enum] if v not in values]
            extra = [v for v in values if v not in enums[enum]]
            what = []
            if missing:
                what.append("missing " + ", ".join(missing))
            if extra:
                what.append("not in the code " + ", ".join(extra))
            if not what:
                what.append(f"order {values} instead of {enums[enum]}")
            fail(f"{doc}: enum {enum}: " + "; ".join(what))
        if enum in by_enum:
            reader_key, pairs = by_enum[enum]
            code_pairs = [(s, v) for s, v in pairs]
            doc_pairs = list(zip(spellings, values))
            if sorted(doc_pairs) != sorted(code_pairs):
                fail(f"{doc}: enum {enum}: JSON spellings {doc_pairs} but the reader accepts {code_pairs}")
            if key is None or key.split(".")[-1] != reader_key:
                fail(f"{doc}: enum {enum}: the JSON key should end in {reader_key!r}, the table says {key!r}")
            if enum in to_strings:
                for s, v in code_pairs:
                    if to_strings[enum].get(v) != s:
                        fail(f"to_string({enum}::{v}) returns {to_strings[enum].get(v)!r}, the reader reads {s!r}")
        elif spellings:
            fail(f"{doc}: enum {enum} has JSON spellings in the table, but the reader reads none")


def check_config_keys():
    keys = strip_comments(read("include/zenflow/engine/detail/config/config_keys.hpp"))
    reader = strip_comments(read("include/zenflow/engine/detail/config/config_json.hpp"))
    ds_keys = string_list(keys, "deepspeed_zenflow_keys")
    ext_keys = string_list(keys, "extension_keys")
    adam_keys = string_list(keys, "adam_param_keys")

    # The lists against the reader's branches.
    ext_body = function_body(reader, r"\bread_extension_key\s*\(") or ""
    zf_body = function_body(reader, r"\bread_zenflow_block\s*\(") or ""
    opt_body = function_body(reader, r"\bread_optimizer_block\s*\(") or ""
    read_ext = {k for k, _ in branches(ext_body)}
    read_ds = {k for k, _ in branches(zf_body)} - {"mode"}  # "mode": the extension branch's own test
    read_adam = set(re.findall(r'name\s*==\s*"(\w+)"', opt_body))
    for what, listed, read_ in (("extension_keys", set(ext_keys), read_ext),
                                ("deepspeed_zenflow_keys", set(ds_keys), read_ds),
                                ("adam_param_keys", set(adam_keys), read_adam)):
        for k in sorted(listed - read_):
            fail(f"config_keys.hpp: {what} lists {k!r}, which the JSON reader does not read")
        for k in sorted(read_ - listed):
            fail(f"config_json.hpp: the reader reads {k!r}, which {what} does not list")

    doc = "docs/config.md"
    md = read(doc)

    def first_cell_keys(text, strip_prefix=""):
        keys = []
        for cells in table_rows(text):
            for k in re.findall(r"`([^`]*)`", cells[0]):
                keys.append(k[len(strip_prefix):] if strip_prefix and k.startswith(strip_prefix) else k)
        return keys

    def compare(place, documented, code):
        for k in sorted(set(code) - set(documented)):
            fail(f"{doc}: {place}: key {k!r} is read by the code but missing from the table")
        for k in sorted(set(documented) - set(code)):
            fail(f"{doc}: {place}: the table lists {k!r}, which the reader does not accept")

    ds_text = section(md, r"`zero_optimization\.zenflow`: DeepSpeed's keys", doc)
    ds_tables = ds_text.split("\n### ")[0]  # the key table, not the sub-sections' tables
    compare("zero_optimization.zenflow", first_cell_keys(ds_tables), ds_keys)
    ext_text = section(md, r"`zenflow_ext`: zenflow's own keys", doc).split("\n### ")[0]
    compare("zenflow_ext", first_cell_keys(ext_text), ext_keys)
    opt_keys = [k for k in first_cell_keys(section(md, r"^## `optimizer`", doc), "params.") if k != "type"]
    compare("optimizer.params", opt_keys, adam_keys)

    # Each enum key's accepted spellings.
    maps = json_enum_maps(reader)
    for text, place in ((ds_tables, "zero_optimization.zenflow"), (ext_text, "zenflow_ext")):
        for cells in table_rows(text):
            keys = re.findall(r"`([^`]*)`", cells[0])
            if len(keys) != 1 or keys[0] not in maps or len(cells) < 3:
                continue
            accepted = re.findall(r'"([^"]*)"', cells[2])
            code = [s for s, _ in maps[keys[0]][1]]
            if sorted(accepted) != sorted(code):
                fail(f"{doc}: {place}.{keys[0]}: accepted {accepted}, the reader accepts {code}")


# ---------------------------------------------------------------------------------------------
# Links

def slug(heading):
    """GitHub's anchor of a heading."""
    h = heading.strip().lower()
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def anchors(path):
    out = set()
    counts = {}
    in_code = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                in_code = not in_code
            if in_code:
                continue
            m = re.match(r"#+\s+(.*?)\s*#*\s*$", line)
            if m:
                s = slug(m.group(1))
                n = counts.get(s, 0)
                counts[s] = n + 1
                out.add(s if n == 0 else f"{s}-{n}")
    return out


def check_links():
    files = ["README.md"]
    files += ["docs/" + f for f in sorted(os.listdir(os.path.join(ROOT, "docs"))) if f.endswith(".md")]
    results = os.path.join(ROOT, "bench/results")
    if os.path.isdir(results):
        files += [f"bench/results/{d}/NOTES.md" for d in sorted(os.listdir(results))
                  if os.path.exists(os.path.join(results, d, "NOTES.md"))]
    link = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
    cache = {}
    for rel in files:
        in_code = False
        for n, line in enumerate(read(rel).split("\n"), 1):
            if line.startswith("```"):
                in_code = not in_code
            if in_code:
                continue
            line = re.sub(r"`[^`]*`", "", line)  # inline code is not a link
            for m in link.finditer(line):
                target = m.group(1)
                if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                    continue
                path, _, anchor = target.partition("#")
                full = os.path.normpath(os.path.join(ROOT, os.path.dirname(rel), path)) if path else \
                    os.path.join(ROOT, rel)
                if not os.path.exists(full):
                    fail(f"{rel}:{n}: link to {target}: no such file")
                    continue
                if anchor and full.endswith(".md"):
                    if full not in cache:
                        cache[full] = anchors(full)
                    if anchor not in cache[full]:
                        fail(f"{rel}:{n}: link to {target}: no heading with that anchor")


def main():
    check_enums()
    check_config_keys()
    check_links()
    if errors:
        print("check_docs.py: the docs do not match the code:", file=sys.stderr)
        for e in errors:
            print("  " + e, file=sys.stderr)
        return 1
    print("check_docs.py: enums, config keys and links match")
    return 0


if __name__ == "__main__":
    sys.exit(main())
