//! The reader against hand-written documents, kubectl's layouts, mutations
//! checked against a full parser, and documents made to cost time or memory.

use super::node::YamlError;
use super::scan::plain_node;
use super::*;
use serde_json::{json, Map};
use std::borrow::Cow;

fn ok(text: &str) -> Value {
    parse(text).unwrap_or_else(|e| panic!("{e}\n---\n{text}"))
}

fn fails(text: &str) -> YamlError {
    match parse(text) {
        Ok(v) => panic!("accepted {text:?} as {v}"),
        Err(e) => e,
    }
}

#[test]
fn kubectl_layout() {
    let text = "\
apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: LS0tLS1CRUdJTg==
    server: https://127.0.0.1:6443
  name: kind-kind
contexts:
- context:
    cluster: kind-kind
    namespace: team-a
    user: kind-kind
  name: kind-kind
current-context: kind-kind
kind: Config
preferences: {}
users:
- name: kind-kind
  user:
    token: abc.def
";
    assert_eq!(
        ok(text),
        json!({
            "apiVersion": "v1",
            "clusters": [{"cluster": {"certificate-authority-data": "LS0tLS1CRUdJTg==",
                                      "server": "https://127.0.0.1:6443"},
                          "name": "kind-kind"}],
            "contexts": [{"context": {"cluster": "kind-kind", "namespace": "team-a",
                                      "user": "kind-kind"},
                          "name": "kind-kind"}],
            "current-context": "kind-kind",
            "kind": "Config",
            "preferences": {},
            "users": [{"name": "kind-kind", "user": {"token": "abc.def"}}]
        })
    );
}

/// What cloud CLIs and minikube write reads as the same document as
/// its JSON form (plain `true` stays a string; see the module docs).
#[test]
fn cloud_kubeconfig_matches_its_json_form() {
    let yaml = include_str!("../../../fixtures/kubeconfig/cloud.yaml");
    let json: Value =
        serde_json::from_str(include_str!("../../../fixtures/kubeconfig/cloud.json")).unwrap();
    assert_eq!(ok(yaml), json);
    assert_eq!(ok(&yaml.replace('\n', "\r\n")), json);
}

#[test]
fn indented_lists_comments_markers_and_nulls() {
    let text = "\
# written by hand
---
users:   # the users
  - name: a   # first
    user:
      exec:
        args:
          - --region
          - \"us-east-1\"
        env: null
        command: aws
  -
    name: b
empty:
tilde: ~
list: [a, 'b c', [1, 2], {k: v, n: }]
...
";
    assert_eq!(
        ok(text),
        json!({
            "users": [
                {"name": "a", "user": {"exec": {"args": ["--region", "us-east-1"],
                                                "env": null, "command": "aws"}}},
                {"name": "b"}
            ],
            "empty": null,
            "tilde": null,
            "list": ["a", "b c", ["1", "2"], {"k": "v", "n": null}]
        })
    );
}

#[test]
fn scalars() {
    let text = r#"plain: a b#c  # comment
url: http://h:1/x
num: 0123
yes: true
sq: 'it''s # not a comment'
dq: "tab\there \"q\" \u00e9 \x41 \\"
folded_plain: one
  two

  three
folded_dq: "a
  b \
  c"
lit: |
  line 1
    indented

keep: |+
  x

strip: >-
  a
  b

  c
    d
  e
"#;
    assert_eq!(
        ok(text),
        json!({
            "plain": "a b#c",
            "url": "http://h:1/x",
            "num": "0123",
            "yes": "true",
            "sq": "it's # not a comment",
            "dq": "tab\there \"q\" é A \\",
            "folded_plain": "one two\nthree",
            "folded_dq": "a b c",
            "lit": "line 1\n  indented\n",
            "keep": "x\n\n",
            "strip": "a b\nc\n  d\ne"
        })
    );
}

#[test]
fn documents_without_a_mapping() {
    assert_eq!(ok(""), Value::Null);
    assert_eq!(ok("# only a comment\n"), Value::Null);
    assert_eq!(ok("---\n"), Value::Null);
    assert_eq!(ok("- a\n- - b\n  - c\n"), json!(["a", ["b", "c"]]));
    assert_eq!(ok("\u{feff}a: 1\r\nb: 2\r\n"), json!({"a": "1", "b": "2"}));
}

#[test]
fn refusals_name_the_line() {
    for (text, line, needle) in [
        (
            "a: 1\nb: *x\n",
            2,
            "the alias *x has no anchor &x before it",
        ),
        ("a: &x\n  *x\n", 2, "one anchor"),
        ("&x a: 1\n", 1, "an anchor on a mapping key"),
        ("a: 1\n*x : 2\n", 2, "anchors and aliases on mapping keys"),
        ("- &x a: 1\n", 1, "an anchor on a mapping key"),
        ("a: &x.y 1\n", 1, "anchor name"),
        ("a: *x y\n", 1, "after the alias"),
        ("a: [&x ]\n", 1, "followed by a value"),
        ("a: !!binary aGk=\n", 1, "!!binary is not supported"),
        ("a: !e!x y\n", 1, "%TAG"),
        ("!!str a: b\n", 1, "a tag on a mapping key"),
        ("- \tx\n", 1, "tab"),
        ("a:\n\tb: 1\n", 2, "tabs"),
        ("a: 1\n  b: 2\n", 2, "`: `"),
        ("a:\n  b: 1\n   c: 2\n", 3, "indentation"),
        ("%YAML 1.2\n---\na: 1\n", 1, "incompatible"),
        ("%YAML 1.1\n%YAML 1.1\n---\na: 1\n", 2, "a second %YAML"),
        ("%YAML 1.1\na: 1\n", 2, "followed by `---`"),
        ("%FOO bar\n---\na: 1\n", 1, "not one kubectl reads"),
        (
            "a: \"x\n---\ny\"\n",
            2,
            "document marker inside a quoted value",
        ),
        ("a: \"open\n  b: 1\n", 1, "unterminated"),
        ("a: [1, 2\n", 2, "`[` opened on line 1 is not closed"),
        ("a: {b: 1\n", 2, "`{` opened on line 1 is not closed"),
        ("a: [1,\n---\n]\n", 2, "document marker"),
        ("a: [\"x\n  y\n", 3, "opened on line 1 is not closed"),
        ("a: [!x, y]\n", 1, "must be followed by a space"),
        (
            "a: [x\n  y]\n",
            2,
            "a value over several lines must be quoted",
        ),
        ("a: <<\n<<: x\n", 2, "a mapping or a list of mappings"),
        ("a: \"\\q\"\n", 1, "invalid escape"),
        ("a: b: c\n", 1, "`: `"),
        ("a: - b\n", 1, "next line"),
        ("? a\n: b\n", 1, "complex"),
        ("a: |x\n  b\n", 1, "block scalar header"),
        ("a: \"x\" y\n", 1, "after a quoted value"),
        ("a: @x\n", 1, "may not start"),
    ] {
        let e = fails(text);
        assert_eq!(e.line, line, "{text:?}: {e}");
        assert!(e.message.contains(needle), "{text:?}: {e}");
    }
}

/// The shape kubectl reads and the JSON fast path used to take for
/// JSON: a flow mapping over several lines, with comments.
#[test]
fn flow_collections_over_several_lines() {
    let text = "\
{apiVersion: v1, kind: Config,
 clusters: [{name: c, cluster: {server: \"https://h:1\",   # a comment
   insecure-skip-tls-verify: true}}],
 users: [
   {name: u, user: {token: t}},
 ],
 contexts: [{name: x, context: {cluster: c, user: u}}],
 current-context: x
}
";
    assert_eq!(
        ok(text),
        json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": "https://h:1",
                                                   "insecure-skip-tls-verify": "true"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x"
        })
    );
    assert_eq!(ok(&text.replace('\n', "\r\n")), ok(text));
    // JSON is YAML, also indented with tabs (kubectl reads it).
    let json = "{\n\t\"a\": [\n\t\t\"b\", true, 1.5, null\n\t],\n\t\"c\": {}\n}\n";
    assert_eq!(ok(json), json!({"a": ["b", "true", "1.5", null], "c": {}}));
    // Inside a block: continuation lines deeper than the key.
    assert_eq!(
        ok("a:\n  b: [x,\n    y]  # c\n  c: {d:\n      e}\nf: g\n"),
        json!({"a": {"b": ["x", "y"], "c": {"d": "e"}}, "f": "g"})
    );
}

/// Shapes kubectl 1.32 reads that this reader refused; each expected
/// value is what `kubectl config view` showed for the same text.
#[test]
fn tabs_tags_documents_and_quoted_flow_lines_read_as_kubectl_reads_them() {
    // A tab separates a key's `:` from its value (not a `- ` from its item).
    assert_eq!(
        ok("a:\tb\nc: \td\ne:\t\tf\t# x\ng: [1,\t2]\nh:\t\n  i: 1\nj: &k\tv\nl:\t*k\n"),
        json!({"a": "b", "c": "d", "e": "f", "g": ["1", "2"], "h": {"i": "1"},
                   "j": "v", "l": "v"})
    );
    assert_eq!(ok("{a:\tb}\n"), json!({"a": "b"}));
    // Tags: `!!str` keeps a string a string; others change nothing here.
    assert_eq!(
        ok(
            "a: !!str 1\nb: !!map {c: d}\nd: &x !!str e\nf: !!str &y g\nh: *y\ni: !!str\n\
                j: !!str null\nk: !!str ~\nl: ! x\nm: !local y\nn: !!seq [a]\n\
                o: !<tag:yaml.org,2002:str> null\nt: !!map\n  u: v\nw: [!!str null, !!str 1]\n\
                p: {q: !!str null, r: !!str , s: 1}\n"
        ),
        json!({"a": "1", "b": {"c": "d"}, "d": "e", "f": "g", "h": "g", "i": "",
                   "j": "null", "k": "~", "l": "x", "m": "y", "n": ["a"], "o": "null",
                   "t": {"u": "v"}, "w": ["null", "1"], "p": {"q": "null", "r": "", "s": "1"}})
    );
    // The first document is the kubeconfig; what follows is not read.
    assert_eq!(ok("a: 1\n---\nb: 2\n"), json!({"a": "1"}));
    assert_eq!(ok("a: 1\n...\n--- {{{ [ garbage\n"), json!({"a": "1"}));
    assert_eq!(ok("---\n---\na: 1\n"), Value::Null);
    // Quoted values over several lines inside flow collections.
    assert_eq!(
        ok(
            "x: {a: 'line1\n    line2', b: \"x\\\n    y\", c: 'u\n\n    v', d: [\"q\n     r\"], \
                e: \"s \n  t\", f: 'w  \n  \n  z'}\n"
        ),
        json!({"x": {"a": "line1 line2", "b": "xy", "c": "u\nv", "d": ["q r"],
                         "e": "s t", "f": "w\nz"}})
    );
}

/// kubectl (go-yaml v2) expands aliases and `<<` merge keys; a key
/// given twice keeps its last value. (Checked against kubectl 1.32.)
#[test]
fn anchors_aliases_and_merge_keys_read_as_kubectl_reads_them() {
    let text = "\
users:
- name: base
  user: &creds {token: from-anchor, as: alice}
- name: other
  user: &other
    token: from-other
    as: bob
    as-uid: \"7\"
- name: u
  user:
    token: explicit-before
    <<: [*creds, *other]
    as-groups: [g]
- name: same
  user: *creds
- &entry
  name: copy
  user: {<<: *other, as: carol}
list: [&x a, *x, {k: *x}]
twice: 1
twice: 2
";
    assert_eq!(
        ok(text),
        json!({
            "users": [
                {"name": "base", "user": {"token": "from-anchor", "as": "alice"}},
                {"name": "other", "user": {"token": "from-other", "as": "bob", "as-uid": "7"}},
                {"name": "u", "user": {"token": "from-anchor", "as": "alice",
                                       "as-uid": "7", "as-groups": ["g"]}},
                {"name": "same", "user": {"token": "from-anchor", "as": "alice"}},
                {"name": "copy", "user": {"token": "from-other", "as": "carol", "as-uid": "7"}}
            ],
            "list": ["a", "a", {"k": "a"}],
            "twice": "2"
        })
    );
}

/// Nine levels of ten aliases each would be a billion copies: refused
/// once the copies pass twice the document's size (at least 1 MiB),
/// quickly and without the memory.
#[test]
fn a_billion_laughs_is_refused_with_a_clear_error() {
    let mut text = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..10 {
        let p = i - 1;
        text += &format!("a{i}: &a{i} [{}]\n", vec![format!("*a{p}"); 10].join(", "));
    }
    let started = std::time::Instant::now();
    let e = fails(&text);
    assert!(e.message.contains("billion laughs"), "{e}");
    assert!(e.message.contains("1024 KiB"), "{e}");
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    // The same in block style.
    let mut block = String::from("a0: &a0\n- lol\n- lol\n- lol\n- lol\n- lol\n");
    for i in 1..20 {
        block += &format!("a{i}: &a{i}\n- *a{}\n- *a{}\n- *a{}\n", i - 1, i - 1, i - 1);
    }
    assert!(fails(&block).message.contains("billion laughs"));
    // Aliases nested in aliases cannot go deeper than the stack allows.
    let mut deep = String::from("a0: &a0 [x]\n");
    for i in 1..80 {
        deep += &format!("a{i}: &a{i} [*a{}]\n", i - 1);
    }
    assert!(fails(&deep).message.contains("nests deeper"));
}

/// Each entry of a flow collection used to look for the end of its
/// line: a long one-line collection took time quadratic in its length
/// (an 8 MiB `[a,a,...]`, under the kubeconfig cap, ran for minutes).
#[test]
fn a_long_one_line_flow_collection_is_read_in_linear_time() {
    let n = 400_000;
    let docs = [
        format!("x: [{}]\n", vec!["a"; n].join(",")),
        format!("x: [{}]\n", vec!["'a'"; n].join(",")),
        format!("x: [{}]\n", vec!["[a]"; n / 2].join(",")),
        format!(
            "x: {{{}}}\n",
            (0..n / 2)
                .map(|i| format!("k{i}: v"))
                .collect::<Vec<_>>()
                .join(",")
        ),
    ];
    for doc in docs {
        let (tx, rx) = std::sync::mpsc::channel();
        let shape = doc[..8].to_string();
        std::thread::spawn(move || {
            let _ = tx.send(parse(&doc).is_ok());
        });
        let parsed = rx.recv_timeout(std::time::Duration::from_secs(10));
        assert_eq!(parsed, Ok(true), "{shape}...: not read within 10 s");
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let flow = format!("a: {}{}\n", "[".repeat(10_000), "]".repeat(10_000));
    assert!(fails(&flow).message.contains("nested deeper"));
    let block: String = (0..10_000)
        .map(|i| format!("{}k:\n", " ".repeat(i)))
        .collect();
    assert!(fails(&block).message.contains("nested deeper"));
    let dashes = format!("{}x\n", "- ".repeat(10_000));
    assert!(fails(&dashes).message.contains("nested deeper"));
}

/// A full YAML parser's reading of `text` in this module's terms
/// (plain `null`/`~`/empty are null, every other scalar a string, a
/// `!!str` scalar a string, other tags ignored, only the first document
/// read); `None` when it refuses the text or it uses what this module
/// refuses (`!!binary`, tags or anchors on keys).
fn oracle(text: &str) -> Option<Value> {
    // kubectl's go-yaml takes a tab after a key's `:` as a space; this
    // parser refuses it.
    oracle_strict(text).or_else(|| oracle_strict(&text.replace(":\t", ": ")))
}

fn oracle_strict(text: &str) -> Option<Value> {
    use yaml_rust2::parser::{Event, Parser};
    let mut parser = Parser::new_from_str(text);
    let mut events = Vec::new();
    loop {
        match parser.next_token().ok()?.0 {
            Event::StreamEnd | Event::DocumentEnd => break,
            Event::StreamStart | Event::DocumentStart | Event::Nothing => {}
            e => events.push(e),
        }
    }
    type Anchors = std::collections::HashMap<usize, Value>;
    fn build(e: Event, it: &mut std::vec::IntoIter<Event>, a: &mut Anchors) -> Option<Value> {
        let is = |tag: &Option<yaml_rust2::parser::Tag>, name: &str| {
            tag.as_ref().is_some_and(|t| {
                (t.handle == "tag:yaml.org,2002:" || t.handle == "!!") && t.suffix == name
            })
        };
        let (value, anchor) = match e {
            Event::Scalar(_, _, _, ref tag) if is(tag, "binary") => return None,
            Event::Scalar(s, style, anchor, tag) => (
                match style {
                    // Untagged, or a tag go-yaml resolves to a type; any
                    // other tag keeps the scalar as written.
                    yaml_rust2::scanner::TScalarStyle::Plain
                        if tag.is_none()
                            || ["null", "bool", "int", "float", "timestamp"]
                                .iter()
                                .any(|n| is(&tag, n)) =>
                    {
                        Value::from(plain_node(Cow::Borrowed(&s)))
                    }
                    _ => Value::String(s),
                },
                anchor,
            ),
            Event::Alias(id) => return a.get(&id).cloned(),
            Event::SequenceStart(anchor, _) => {
                let mut items = Vec::new();
                loop {
                    match it.next()? {
                        Event::SequenceEnd => break,
                        e => items.push(build(e, it, a)?),
                    }
                }
                (Value::Array(items), anchor)
            }
            Event::MappingStart(anchor, _) => {
                let mut map = Map::new();
                loop {
                    let key = match it.next()? {
                        Event::MappingEnd => break,
                        Event::Scalar(k, _, 0, None) => k,
                        _ => return None,
                    };
                    // A key given twice keeps its last value, as kubectl reads it.
                    let value = build(it.next()?, it, a)?;
                    map.insert(key, value);
                }
                (Value::Object(map), anchor)
            }
            _ => return None,
        };
        if anchor != 0 {
            a.insert(anchor, value.clone());
        }
        Some(value)
    }
    let mut it = events.into_iter();
    let value = match it.next() {
        None => Value::Null,
        Some(e) => build(e, &mut it, &mut Anchors::new())?,
    };
    it.next().is_none().then_some(value)
}

const SEEDS: &[&str] = &[
        include_str!("../../../fixtures/kubeconfig/cloud.yaml"),
        "apiVersion: v1\nclusters:\n- cluster:\n    server: \"https://h:1\"\n    \
         certificate-authority-data: QUJD\n  name: c\nusers:\n  - name: u\n    user:\n      \
         token: 't'\n      exec: {args: [a, \"b\"]}\nlit: |-\n  x\n  y\n",
        "a: 'it''s'\nb: \"x\\ty \\u00e9\"\nc: one\n  two\n\n  three\nd: >-\n  a\n  b\n\n  c\n\
         e: |+\n  x\n\nf: [a, 'b c', {k: v}]\ng:\n- h\n- - i\n  - j: k\n    l: \"m\\\n      n\"\n",
        "# c\n---\nusers:   # u\n  - name: a   # n\n    user:\n      exec:\n        args:\n\
         \x20         - --region\n          - \"x\"\n        env: null\n  -\n    name: b\n\
         empty:\ntilde: ~\n...\n",
        "{apiVersion: v1, kind: Config,\n clusters: [{name: c, cluster: {server: \"https://h:1\",\n   \
         insecure-skip-tls-verify: true}}],  # c\n users: [\n   {name: u, user: {token: t}}\n ],\n \
         current-context: x}\n",
        "clusters:\n- name: c\n  cluster: &cl\n    server: https://h:1\n- name: d\n  cluster: *cl\n\
         users:\n- name: u\n  user: &creds {token: t, as: alice}\n- &v\n  name: v\n  user: *creds\n\
         list: [&x a, *x, {k: *x}]\nm: &m\n  - a\n  - *x\nn: *m\n",
        "a:\n  b: [x,\n    y, {c: d,\n      e: f}]\n  g: {h: i,\n    j: [k]}   # c\nl: [\n  'm', \"n\"\n  ]\n",
    ];

/// Every seed, and thousands of deterministic mutations of them: none
/// panics, and whatever this module accepts, a full YAML parser reads
/// the same way.
#[test]
fn mutations_agree_with_a_full_parser_or_are_refused() {
    for seed in SEEDS {
        assert_eq!(Some(ok(seed)), oracle(seed), "{seed}");
    }
    // `LEASE_ELECTOR_FUZZ_ROUNDS=1000000 LEASE_ELECTOR_FUZZ_SEED=7
    // cargo test --release --lib yaml` digs deeper.
    let var = |name: &str| std::env::var(name).ok().and_then(|r| r.parse::<u64>().ok());
    let rounds = var("LEASE_ELECTOR_FUZZ_ROUNDS").map_or(30_000, |r| r as usize);
    let alphabet = b" -:#\"'\\|>[]{},\n\tax&*!?%~.0";
    let mut state = 0x9e37_79b9_7f4a_7c15_u64 ^ var("LEASE_ELECTOR_FUZZ_SEED").unwrap_or(0);
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (mut accepted, mut refused, mut laxer) = (0, 0, 0);
    for round in 0..rounds {
        let seed = SEEDS[round % SEEDS.len()];
        let mut bytes = seed.as_bytes().to_vec();
        for _ in 0..1 + next() % 4 {
            let at = (next() % bytes.len() as u64) as usize;
            let c = alphabet[(next() % alphabet.len() as u64) as usize];
            match next() % 3 {
                0 => bytes[at] = c,
                1 => bytes.insert(at, c),
                _ => {
                    bytes.remove(at);
                }
            }
        }
        let text = String::from_utf8_lossy(&bytes);
        match parse(&text) {
            Ok(mine) => {
                accepted += 1;
                match oracle(&text) {
                    Some(theirs) => assert_eq!(mine, theirs, "read differently:\n{text}"),
                    // kubectl's libyaml does not look at the indentation of
                    // a flow collection's or a quoted value's continuation
                    // lines; the strict parser refuses them. Anything else
                    // the strict parser refuses must be refused here too.
                    None => {
                        assert!(
                            continues_below_its_indentation(&text),
                            "accepted what a full parser refuses:\n{text}"
                        );
                        laxer += 1;
                    }
                }
            }
            Err(_) => refused += 1,
        }
    }
    // The mutations must exercise both outcomes to mean anything.
    assert!(
        accepted > 3_000 && refused > 3_000 && laxer < accepted / 20,
        "{accepted} / {refused} / {laxer}"
    );
}

/// Whether `text` reads the same once every line inside a flow collection
/// or a quoted value is indented further: then the strict parser's refusal
/// was about that indentation only, which kubectl does not check.
fn continues_below_its_indentation(text: &str) -> bool {
    // A quote at a line's start opens a quoted value, or continues a plain
    // one (`one\n  'two`): both readings are tried.
    [true, false].into_iter().any(|quote_at_line_start| {
        let shifted = shift_continuations(text, quote_at_line_start);
        shifted != text && oracle(&shifted).is_some() && parse(&shifted).ok() == parse(text).ok()
    })
}

/// `text` with every line inside a flow collection or a quoted value
/// indented 64 spaces further.
fn shift_continuations(text: &str, quote_at_line_start: bool) -> String {
    let mut shifted = String::new();
    let (mut open, mut quote) = (0i32, None);
    for line in text.split_inclusive('\n') {
        if open > 0 || quote.is_some() {
            shifted.push_str(&" ".repeat(64));
        }
        // Brackets and quotes count where a value starts: at the line's
        // start, after `- `, `: `, an anchor or a tag, and in a flow
        // collection after `[`, `{` or `,`.
        let mut at_start = quote.is_none() && quote_at_line_start;
        let mut chars = line.chars().peekable();
        let mut after_blank = true;
        while let Some(c) = chars.next() {
            let comment = c == '#' && after_blank;
            after_blank = c == ' ' || c == '\t';
            let next_blank = matches!(chars.peek(), None | Some(' ' | '\t' | '\n' | '\r'));
            match (quote, c) {
                (Some('"'), '\\') => {
                    chars.next();
                }
                (Some('\''), '\'') if chars.peek() == Some(&'\'') => {
                    chars.next();
                }
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, ' ' | '\t') => continue,
                // An anchor or a tag: the value starts after it.
                (None, '&' | '!') if at_start => {
                    while chars.next_if(|c| !c.is_whitespace()).is_some() {}
                    continue;
                }
                (None, '"' | '\'') if at_start => quote = Some(c),
                (None, '[' | '{') if at_start || open > 0 => {
                    open += 1;
                    at_start = true;
                    continue;
                }
                (None, ']' | '}') if open > 0 => open -= 1,
                (None, ',') if open > 0 => {
                    at_start = true;
                    continue;
                }
                (None, ':' | '-') if next_blank => {
                    at_start = true;
                    continue;
                }
                (None, '#') if comment => break,
                _ => {}
            }
            at_start = false;
        }
        shifted.push_str(line);
    }
    shifted
}

/// What kubectl's go-yaml reads and a strict YAML 1.2 parser refuses: a
/// flow collection's lines and a quoted value's continuation at any
/// indentation (a `]` at column 0 in hand-written files), `%YAML 1.1`.
#[test]
fn continuation_lines_at_any_indentation_and_a_yaml_1_1_directive_read_as_kubectl_reads_them() {
    assert_eq!(
        ok("a: [1,\n2]\nb:\n  c: {d: e,\n f: g\n}\nh: [\n  {i: j}\n]\n"),
        json!({"a": ["1", "2"], "b": {"c": {"d": "e", "f": "g"}}, "h": [{"i": "j"}]})
    );
    assert_eq!(ok("a: [1,\n\t2]\n"), json!({"a": ["1", "2"]}));
    assert_eq!(
        ok("a:\n  b: \"open\nc: 1\"\n  d: 'x\n y'\n"),
        json!({"a": {"b": "open c: 1", "d": "x y"}})
    );
    assert_eq!(
        ok("%YAML 1.1 # c\n%TAG !e! tag:example.com,2000:\n---\na: 1\n"),
        json!({"a": "1"})
    );
}
