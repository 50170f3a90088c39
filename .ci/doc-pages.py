#!/usr/bin/env python3
"""Checks the rendered rustdoc of lease_elector for what rustdoc lets pass.

rustdoc denies broken and private intra-doc links, but a link to a
`#[doc(hidden)]` item is neither: it renders as literal `[Lock]` text. Nor
does it say when a public signature names a type that has no page, or
when an example `use`s a path the documentation never shows. This script
reads the HTML under target/doc/lease_elector (after `cargo doc --no-deps
--all-features`) and reports, with the page each is on:

- a docblock with a literal `[Name]` or `[`Name`]` (a link that resolved
  to nothing visible);
- a signature (an item's declaration, a method's or field's header) naming
  a type that is not a link: an item without a page (a generic parameter
  is one letter, or declared in the header);
- an example's path into `lease_elector` that names no documented item;
- an example that does not compile as the page shows it (hidden `# ` lines
  are not on the page, so an example must not need them): every rendered
  Rust example but those marked ignore or compile_fail is put in a module
  of a scratch crate under target/doc-examples (one with a `fn main` as
  it is; one without inside `fn main() -> Result<(), Box<dyn Error>>`, as
  a reader pastes it) and `cargo check`ed against the crate with every
  feature.

Usage: .ci/doc-pages.py [--no-compile] [target/doc]. Exit status 1 when
anything was found.
"""

import html
import json
import os
import re
import shutil
import subprocess
import sys

ARGS = [a for a in sys.argv[1:] if a != "--no-compile"]
COMPILE = "--no-compile" not in sys.argv[1:]
TARGET = os.environ.get("CARGO_TARGET_DIR", "target")
DOC = ARGS[0] if ARGS else os.path.join(TARGET, "doc")
ROOT = os.path.join(DOC, "lease_elector")


def pages():
    for dirpath, _, files in os.walk(ROOT):
        for f in files:
            if not f.endswith(".html"):
                continue
            path = os.path.join(dirpath, f)
            text = open(path, encoding="utf-8").read()
            if 'http-equiv="refresh"' in text:  # a re-export's redirect
                continue
            yield os.path.relpath(path, DOC), text


def documented():
    """Paths of documented items and modules, as `lease_elector::a::B`."""
    items = {"lease_elector"}
    modules = {"lease_elector"}
    text = open(os.path.join(ROOT, "all.html"), encoding="utf-8").read()
    for href, name in re.findall(r'<a href="([^"#]+\.html)">([^<]+)</a>', text):
        items.add("lease_elector::" + name)
    for dirpath, _, files in os.walk(ROOT):
        if "index.html" in files:
            rel = os.path.relpath(dirpath, DOC).replace(os.sep, "::")
            modules.add(rel)
            items.add(rel)
    return items, modules


def strip_tags(s):
    return html.unescape(re.sub(r"<[^>]+>", "", s))


def dead_links(text):
    # Docblocks only: code (declarations, examples) and comments removed.
    out = []
    for block in re.findall(r'<div class="docblock[^"]*">(.*?)</div>', text, re.S):
        block = re.sub(r"<pre.*?</pre>", "", block, flags=re.S)
        block = re.sub(r"<a [^>]*>.*?</a>", "", block, flags=re.S)
        for m in re.findall(r"\[(?:<code>)?([A-Za-z_][A-Za-z0-9_:]*(?:\(\))?)(?:</code>)?\]", block):
            out.append(f"[{m}]")
    return out


SIGNATURE = re.compile(
    r'<pre class="rust item-decl">(.*?)</pre>'
    r'|<h4 class="code-header">(.*?)</h4>'
    r'|<span id="(?:structfield|variant)\.[^"]*" class="[^"]*section-header[^"]*">(.*?)</span>(?=<|$)',
    re.S,
)


def generic_params(sig):
    """Names declared as generic parameters: `fn f<K: Into<String>, V>`, `impl<T>`."""
    names = set()
    for m in re.finditer(r"(?:\bimpl|\b(?:fn|struct|enum|trait|type|union)\s+\w+)\s*<", sig):
        depth, start = 1, m.end()
        at_param = True
        for i in range(start, len(sig)):
            ch = sig[i]
            if depth == 1 and at_param:
                word = re.match(r"\s*([A-Z]\w*)", sig[i:])
                if word:
                    names.add(word.group(1))
                at_param = False
            if ch == "<":
                depth += 1
            elif ch == ">" and sig[i - 1] != "-":
                depth -= 1
                if depth == 0:
                    break
            elif ch == "," and depth == 1:
                at_param = True
    return names


def unlinked_types(text):
    out = []
    for groups in SIGNATURE.findall(text):
        sig = next(g for g in groups if g)
        sig = re.sub(r'<span class="comment">.*?</span>', "", sig, flags=re.S)
        sig = re.sub(r'<div class="where">', " ", sig)
        bare = strip_tags(re.sub(r"<a [^>]*>.*?</a>", " ", sig, flags=re.S))
        bare = re.sub(r"#\[[^\]]*\]", "", bare)  # attributes
        bare = re.sub(r"//[^\n]*", "", bare)  # `// Required methods`
        bare = re.sub(r"Show \d+ (?:fields|variants)", "", bare)
        # The item's own name, and what a constant's value is made of.
        bare = re.sub(r"\b(const\b[^=]*)=.*", r"\1", bare, flags=re.S)
        bare = re.sub(r"\b\w+\s*=(?!=)", "", bare)  # `Item = T`, `E = Error`
        bare = re.sub(r"\b(?:struct|enum|trait|type|const|static|fn|union|mod)\s+\w+", "", bare)
        if groups[0] and "enum" in strip_tags(sig).split("{")[0]:
            # Variant names (after `{` or `,`, before `(`, `{` or `,`).
            bare = re.sub(r"(?<=[{,])(\s*)[A-Z]\w*(?=\s*[({,}])", r"\1", bare)
        params = generic_params(strip_tags(sig))
        for name in re.findall(r"\b([A-Z][A-Za-z0-9_]*)\b", bare):
            if len(name) == 1 or name == "Self" or name in params:
                continue
            out.append(f"{name} in `{' '.join(strip_tags(sig).split())[:160]}`")
    return out


def use_paths(code):
    """Every `lease_elector::...` path an example names, `use` groups expanded."""
    paths = []

    def expand(prefix, tree):
        tree = tree.strip()
        if not tree:
            return
        if tree.endswith("}") and "{" in tree:
            head, body = tree.split("{", 1)
            head = head.strip().rstrip(":").strip()
            base = f"{prefix}::{head}" if head else prefix
            depth, part = 0, ""
            for ch in body[:-1]:
                if ch == "," and depth == 0:
                    expand(base, part)
                    part = ""
                    continue
                depth += ch == "{"
                depth -= ch == "}"
                part += ch
            expand(base, part)
            return
        tree = re.split(r"\s+as\s+", tree)[0].strip()
        if tree in ("self", "*"):
            paths.append(prefix)
        else:
            paths.append(f"{prefix}::{tree}")

    for m in re.finditer(r"\buse\s+lease_elector::(.*?);", code, re.S):
        expand("lease_elector", m.group(1))
    code = re.sub(r"\buse\s+lease_elector::.*?;", "", code, flags=re.S)
    for m in re.finditer(r"\blease_elector(?:::[A-Za-z_][A-Za-z0-9_]*)+", code):
        paths.append(m.group(0))
    return paths


def undocumented_paths(text, items, modules):
    out = []
    for code in re.findall(r'<pre class="rust rust-example-rendered"><code>(.*?)</code></pre>', text, re.S):
        code = strip_tags(code)
        for path in use_paths(code):
            segs = path.split("::")
            prefix = segs[0]
            for seg in segs[1:]:
                prefix = f"{prefix}::{seg}"
                if prefix in modules:
                    continue
                if prefix not in items:
                    out.append(path)
                break
    return out


EXAMPLE = re.compile(
    r'<div class="example-wrap([^"]*)">(?:(?!<pre).)*?'
    r'<pre class="rust rust-example-rendered"><code>(.*?)</code></pre>',
    re.S,
)


def rendered_examples(text):
    """The Rust examples of a page as they read (hidden lines are not
    rendered), but those that are not meant to compile."""
    out = []
    for classes, code in EXAMPLE.findall(text):
        if "ignore" in classes.split() or "compile_fail" in classes.split():
            continue
        out.append(strip_tags(code))
    return out


def example_module(name, code):
    if re.search(r"^\s*fn main\s*\(", code, re.M):
        body = code
    else:
        body = (
            "pub fn main() -> Result<(), Box<dyn std::error::Error>> {\n"
            + code
            + "\n#[allow(unreachable_code)]\nOk(())\n}\n"
        )
    return f"#[allow(warnings, clippy::all)]\nmod {name} {{\n{body}\n}}\n"


def compile_examples(examples):
    """`cargo check` every example in a scratch crate; the problems found,
    as (page, example's first line, the compiler's first error)."""
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(here)
    crate = os.path.join(repo, TARGET, "doc-examples")
    os.makedirs(os.path.join(crate, "src"), exist_ok=True)
    manifest = open(os.path.join(repo, "Cargo.toml"), encoding="utf-8").read()
    dev = manifest.split("[dev-dependencies]", 1)[1].split("\n[", 1)[0]
    deps = [
        line for line in dev.splitlines()
        if re.match(r"^(signal-hook|env_logger)\s*=", line)
    ]
    open(os.path.join(crate, "Cargo.toml"), "w", encoding="utf-8").write(
        "[package]\nname = \"doc-examples\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n"
        "[workspace]\n\n[dependencies]\n"
        f"lease-elector = {{ path = {json.dumps(repo)}, features = [\"testing\", \"health\", \"cli\"] }}\n"
        "log = \"0.4\"\n" + "\n".join(deps) + "\n"
    )
    shutil.copy(os.path.join(repo, "Cargo.lock"), os.path.join(crate, "Cargo.lock"))
    names = {}
    src = ["// Generated by .ci/doc-pages.py: the rendered doc examples.\nfn main() {}\n"]
    for i, (page, code) in enumerate(examples):
        name = f"example_{i}"
        names[name] = (page, code)
        src.append(f"// {page}\n" + example_module(name, code))
    open(os.path.join(crate, "src", "main.rs"), "w", encoding="utf-8").write("\n".join(src))
    run = subprocess.run(
        ["cargo", "check", "--quiet", "--message-format=json", "--manifest-path",
         os.path.join(crate, "Cargo.toml"), "--target-dir", os.path.join(repo, TARGET)],
        capture_output=True, text=True,
    )
    problems = []
    for line in run.stdout.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        m = msg.get("message") if msg.get("reason") == "compiler-message" else None
        if not m or m.get("level") != "error":
            continue
        spans = [sp for sp in m.get("spans", []) if sp.get("is_primary")]
        where = "?"
        if spans:
            lineno = spans[0]["line_start"]
            text = open(os.path.join(crate, "src", "main.rs"), encoding="utf-8").read().splitlines()
            for j in range(lineno - 1, -1, -1):
                found = re.match(r"mod (example_\d+) \{", text[j])
                if found:
                    where = found.group(1)
                    break
        page, code = names.get(where, ("?", ""))
        first = code.strip().splitlines()[0] if code.strip() else ""
        problems.append((page, first, m.get("message", "")))
    if run.returncode != 0 and not problems:
        problems.append(("(the scratch crate)", "", run.stderr.strip()[-2000:]))
    return problems


def main():
    if not os.path.isfile(os.path.join(ROOT, "all.html")):
        print(f"{ROOT}/all.html is missing: run cargo doc --no-deps --all-features first", file=sys.stderr)
        return 2
    items, modules = documented()
    found = 0
    examples, seen = [], set()
    for page, text in sorted(pages()):
        if page.startswith("src" + os.sep) or "/src/" in page:
            continue
        for code in rendered_examples(text):
            if code not in seen:
                seen.add(code)
                examples.append((page, code))
        for what, problems in (
            ("link to nothing visible", dead_links(text)),
            ("type without a page", unlinked_types(text)),
            ("example path to an undocumented item", undocumented_paths(text, items, modules)),
        ):
            for p in sorted(set(problems)):
                print(f"{page}: {what}: {p}")
                found += 1
    if COMPILE:
        problems = compile_examples(examples)
        for page, first, error in problems:
            print(f"{page}: example that does not compile as shown ({first!r}): {error}")
        found += len(problems)
        print(f"doc examples: {len(examples)} checked, {len(problems)} error(s)")
    print(f"doc pages: {found} problem(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
