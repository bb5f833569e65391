//! An adapter through the engine: greedy answers with an adapter and the MTP drafter are the
//! adapter's own answers (the drafts are checked by the adapted model), and switching the
//! adapter off gives the base model's answer again without a reload.

mod common;

use std::sync::atomic::AtomicBool;

use common::{fixture, greedy, load_f32};
use engine::loaded::LoadedModel;
use engine::stream::{Session, StreamRequest};
use engine::template::{Message, Role};

#[path = "../../random_adapter.rs"]
#[allow(dead_code)]
mod random_adapter;

/// The greedy answer's ids, and how many speculative rounds checked drafts in it.
fn answer(m: &LoadedModel) -> (Vec<u32>, usize) {
    let cancel = AtomicBool::new(false);
    let prompt = m
        .prompt(
            &[Message::text(Role::User, "Tell me about rivers.")],
            false,
            &[],
        )
        .unwrap();
    let mut session = Session::new(&m.model);
    let mut ids = Vec::new();
    let usage = m
        .generate(
            StreamRequest::new(&mut session, &prompt, &greedy(40), &cancel),
            |d| ids.extend(d.token),
        )
        .unwrap();
    (ids, usage.speculative.map_or(0, |s| s.rounds))
}

#[test]
fn greedy_with_an_adapter_and_the_drafter_is_the_adapters_own_answer() {
    let mut m = load_f32();
    let (base, _) = answer(&m);
    let work = tempfile::tempdir().unwrap();
    random_adapter::write_adapter(&m.model, work.path(), 16, 4, true, false);
    let adapter = m.model.load_adapter(work.path()).unwrap();
    m.model.set_adapter(Some(adapter)).unwrap();
    let (adapted, _) = answer(&m);
    assert_ne!(adapted, base, "the adapter does not change the answer");

    let drafter = fixture().with_file_name("tiny-assistant");
    m.load_drafter(&drafter, None).unwrap();
    let (drafted, rounds) = answer(&m);
    assert!(rounds > 0, "no draft was checked");
    assert_eq!(drafted, adapted, "drafting changed the adapter's answer");
    m.unload_drafter();

    m.model.set_adapter(None).unwrap();
    assert_eq!(answer(&m).0, base, "off is not the base model's answer");
}
