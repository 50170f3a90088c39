//! The README's fake-cluster walk-through is `examples/fake-cluster.sh`,
//! word for word, so that what CI runs (`bash -e examples/fake-cluster.sh`
//! in `.ci/run`) is what a newcomer pastes.

#[test]
fn the_readme_walkthrough_is_the_script_ci_runs() {
    let readme = include_str!("../README.md");
    let script = include_str!("../examples/fake-cluster.sh");
    let section = readme
        .split("### A fake cluster on your laptop")
        .nth(1)
        .expect("the walk-through section");
    // Its sh blocks: the install lines, then the walk-through.
    let blocks: Vec<&str> = section
        .split("```sh\n")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .collect();
    assert!(
        blocks.contains(&script),
        "no sh block of the section is the script: {blocks:?}"
    );
    for step in [
        "kill -TERM $POD_A",
        "kill -KILL $POD_B",
        "kubectl get events",
        // A failed step under `bash -e` leaves no server or candidate behind.
        "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT",
    ] {
        assert!(script.contains(step), "{step}");
    }
}
