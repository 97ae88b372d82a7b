//! `xpu::models::tokenizer::ClipTokenizer` against transformers' slow `CLIPTokenizer` (without
//! ftfy): every prompt of tests/fixtures/clip_tokenizer/cases.json (made by
//! tests/fixtures/make_tokenizer_fixtures.py) in four configurations (Stable Diffusion 1.x's
//! full vocabulary, 2.x's `!` padding, a 2000-merge vocabulary as tiny pipelines have, and a
//! fast tokenizer's `tokenizer.json`); errors for missing and corrupt files; and seeded random
//! text, which must never fail and always give `model_max_length` ids framed by the start and
//! end tokens. Host-only: the tokenizer has no device part.

use crate::common;
use std::path::{Path, PathBuf};

use serde_json::Value;
use xpu::models::tokenizer::{ClipTokenizer, ClipTokenizerConfig, Encoding};
use xpu::Error;

fn fixtures() -> PathBuf {
    common::repo_root().join("tests/fixtures/clip_tokenizer")
}

fn cases() -> Value {
    let text = std::fs::read_to_string(fixtures().join("cases.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// A fresh folder unique to this process and test, removed when dropped.
struct Folder(PathBuf);

impl Folder {
    fn new(name: &str) -> Folder {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("xpu-clip-tok-{}-{n}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Folder(dir)
    }

    fn put(&self, name: &str, bytes: &[u8]) {
        std::fs::write(self.0.join(name), bytes).unwrap();
    }

    /// Copies `names` from the fixture folder `from`.
    fn copy(&self, from: &Path, names: &[&str]) {
        for n in names {
            std::fs::copy(from.join(n), self.0.join(n)).unwrap();
        }
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const VOCAB_FILES: [&str; 2] = ["vocab.json", "merges.txt"];
const CONFIG_FILES: [&str; 2] = ["tokenizer_config.json", "special_tokens_map.json"];

/// The tokenizer of one fixture configuration, loaded as a pipeline would load it.
fn load(name: &str) -> ClipTokenizer {
    let root = fixtures();
    match name {
        "sd1" => ClipTokenizer::from_folder(&root).unwrap(),
        // The 2.x configs beside a copy of the full vocabulary.
        "sd2" => {
            let dir = Folder::new("sd2");
            dir.copy(&root, &VOCAB_FILES);
            dir.copy(&root.join("sd2"), &CONFIG_FILES);
            ClipTokenizer::from_folder(&dir.0).unwrap()
        }
        "small" => ClipTokenizer::from_folder(root.join("small")).unwrap(),
        "fast_json" => ClipTokenizer::from_folder(root.join("fast_json")).unwrap(),
        _ => panic!("unknown configuration {name}"),
    }
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

const CONFIGS: [&str; 4] = ["sd1", "sd2", "small", "fast_json"];

#[test]
fn configs_match_transformers() {
    let doc = cases();
    for name in CONFIGS {
        let tok = load(name);
        let want = &doc["configs"][name];
        assert_eq!(
            tok.vocab_size() as u64,
            want["vocab_size"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(
            tok.model_max_length() as u64,
            want["model_max_length"].as_u64().unwrap()
        );
        for (got, key) in [
            (tok.pad_id(), "pad_id"),
            (tok.bos_id(), "bos_id"),
            (tok.eos_id(), "eos_id"),
            (tok.unk_id(), "unk_id"),
        ] {
            assert_eq!(got as u64, want[key].as_u64().unwrap(), "{name} {key}");
        }
        assert_eq!(tok.config().pad_token, want["pad_token"].as_str().unwrap());
    }
}

/// Every prompt, every configuration: padded ids, attention length, unpadded ids, the
/// truncated text diffusers warns with, and the decoded text.
#[test]
fn every_case_matches_transformers() {
    let doc = cases();
    let all = doc["cases"].as_array().unwrap();
    assert!(all.len() >= 60, "{} cases", all.len());
    let mut checked_fast = 0;
    for name in CONFIGS {
        let tok = load(name);
        let mut failures = Vec::new();
        for case in all {
            let text = case["text"].as_str().unwrap();
            let want = &case[name];
            let want_ids = ids(&want["ids"]);
            let length = want["length"].as_u64().unwrap() as usize;
            let untruncated = match want.get("untruncated") {
                Some(u) => ids(u),
                None => want_ids[..length].to_vec(),
            };
            let enc = tok.encode(text).unwrap();
            let mut bad = Vec::new();
            if enc.ids != want_ids {
                bad.push(format!("ids\n  got  {:?}\n  want {:?}", enc.ids, want_ids));
            }
            if enc.length != length {
                bad.push(format!("length {} != {length}", enc.length));
            }
            let truncated = want["truncated_text"].as_str().unwrap();
            if enc.truncated_text != truncated {
                bad.push(format!(
                    "truncated text {:?} != {truncated:?}",
                    enc.truncated_text
                ));
            }
            if enc.is_truncated() == truncated.is_empty() {
                bad.push("is_truncated".into());
            }
            let unpadded = tok.encode_unpadded(text).unwrap();
            if unpadded != untruncated {
                bad.push(format!("unpadded {unpadded:?} != {untruncated:?}"));
            }
            let decoded = tok.decode(&untruncated).unwrap();
            if decoded != want["decoded"].as_str().unwrap() {
                bad.push(format!("decoded {decoded:?} != {:?}", want["decoded"]));
            }
            // Where the fast tokenizer disagrees, this one follows the slow one.
            if let Some(fast) = want.get("fast") {
                assert_ne!(
                    enc.ids,
                    ids(fast),
                    "{name} {text:?}: equals the fast tokenizer's"
                );
                checked_fast += 1;
            }
            if !bad.is_empty() {
                failures.push(format!("{name} {text:?}:\n{}", bad.join("\n")));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    }
    assert_eq!(
        checked_fast as u64,
        doc["disagreements"]["fast"].as_u64().unwrap()
    );
}

#[test]
fn shareable_across_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<ClipTokenizer>();
    let tok = load("small");
    let texts = ["a photo of a cat", "a dog", "猫 and 🐱"];
    let want: Vec<Encoding> = texts.iter().map(|t| tok.encode(t).unwrap()).collect();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..50 {
                    assert_eq!(tok.encode_batch(&texts).unwrap(), want);
                }
            });
        }
    });
}

#[test]
fn tokens_ids_and_batch_agree() {
    let tok = load("sd1");
    let text = "A photo of a CAT, don't you think? 猫";
    let tokens = tok.tokenize(text).unwrap();
    let ids = tok.token_ids(text).unwrap();
    assert_eq!(tokens.len(), ids.len());
    for (t, id) in tokens.iter().zip(&ids) {
        assert_eq!(tok.token_to_id(t), Some(*id), "{t}");
        assert_eq!(tok.id_to_token(*id), Some(t.as_str()));
    }
    assert_eq!(tokens[..3], ["a</w>", "photo</w>", "of</w>"]);
    let batch = tok.encode_batch(&["a cat", text, ""]).unwrap();
    assert_eq!(batch.len(), 3);
    assert_eq!(batch[1], tok.encode(text).unwrap());
    assert_eq!(batch[2].ids[..2], [tok.bos_id(), tok.eos_id()]);
    assert_eq!(batch[2].length, 2);
    assert_eq!(batch[0].attention_mask().iter().sum::<u32>(), 4);
    assert_eq!(batch[0].truncation_warning(), None);
    let long = tok.encode(&"cat ".repeat(80)).unwrap();
    assert_eq!(
        long.truncation_warning().unwrap(),
        "The following part of your input was truncated because CLIP can only handle sequences \
         up to 77 tokens: cat cat cat cat cat"
    );
    assert_eq!(
        long.truncated_ids,
        vec![tok.token_to_id("cat</w>").unwrap(); 5]
    );
    assert!(tok.decode(&[49408]).is_err());
}

/// Only `tokenizer.json`: special tokens from its post-processor and added tokens; it states no
/// padding, so padding is the end token, while `!` (an added token) still splits out as id 0.
#[test]
fn tokenizer_json_alone() {
    let doc = cases();
    let root = fixtures().join("fast_json");
    let dir = Folder::new("json-alone");
    dir.copy(&root, &["tokenizer.json"]);
    for tok in [
        ClipTokenizer::from_folder(&dir.0).unwrap(),
        ClipTokenizer::from_tokenizer_json(root.join("tokenizer.json")).unwrap(),
    ] {
        assert_eq!(tok.pad_id(), tok.eos_id());
        assert_eq!(tok.model_max_length(), 77);
        for case in doc["cases"].as_array().unwrap() {
            let want = &case["fast_json"];
            let length = want["length"].as_u64().unwrap() as usize;
            let enc = tok.encode(case["text"].as_str().unwrap()).unwrap();
            assert_eq!(
                enc.ids[..length],
                ids(&want["ids"])[..length],
                "{}",
                case["text"]
            );
            assert!(enc.ids[length..].iter().all(|&id| id == tok.eos_id()));
        }
    }
}

/// The same vocabulary through `from_files` and a config given in code.
#[test]
fn from_files_with_configs() {
    let root = fixtures();
    let sd1 = ClipTokenizer::from_files(root.join("vocab.json"), root.join("merges.txt")).unwrap();
    let sd2 = ClipTokenizer::from_files_with_config(
        root.join("vocab.json"),
        root.join("merges.txt"),
        ClipTokenizerConfig::stable_diffusion_2(),
    )
    .unwrap();
    assert_eq!(
        sd1.config(),
        &ClipTokenizerConfig::from_folder(&root).unwrap()
    );
    assert_eq!((sd1.pad_id(), sd2.pad_id()), (49407, 0));
    let a = sd1.encode("hello!").unwrap();
    let b = sd2.encode("hello!").unwrap();
    assert_eq!(a.ids[..4], [49406, 3306, 256, 49407]);
    assert_eq!(b.ids[..4], [49406, 3306, 0, 49407]);
    assert!(a.ids[4..].iter().all(|&i| i == 49407) && b.ids[4..].iter().all(|&i| i == 0));
    // A textual-inversion style added token with an id past the vocabulary.
    let config = ClipTokenizerConfig {
        model_max_length: 8,
        added_tokens: vec![xpu::models::tokenizer::AddedToken {
            content: "<cat-toy>".into(),
            id: Some(49408),
            special: false,
        }],
        ..Default::default()
    };
    let ti = ClipTokenizer::from_files_with_config(
        root.join("vocab.json"),
        root.join("merges.txt"),
        config,
    )
    .unwrap();
    let enc = ti.encode("a <cat-toy> on a table by the sea").unwrap();
    assert_eq!(enc.ids.len(), 8);
    assert_eq!(enc.ids[..3], [49406, 320, 49408]);
    assert_eq!(enc.truncated_text, "the sea");
    assert_eq!(
        ti.decode(&enc.ids[..4]).unwrap(),
        "<|startoftext|>a <cat-toy> on"
    );
}

fn message(e: &Error) -> String {
    e.to_string()
}

/// Loads `dir` expecting an error whose message names `file` and contains `words`.
fn expect_error(dir: &Path, file: &str, words: &str) {
    let err = ClipTokenizer::from_folder(dir).expect_err("loading should fail");
    let msg = message(&err);
    assert!(
        msg.contains(file) && msg.contains(words),
        "{msg:?} lacks {file:?} / {words:?}"
    );
}

#[test]
fn missing_and_corrupt_files() {
    let small = fixtures().join("small");
    // A folder that is not there, and one without vocabulary files.
    let gone = std::env::temp_dir().join("xpu-clip-tok-no-such-folder");
    expect_error(&gone, "xpu-clip-tok-no-such-folder", "not a folder");
    let dir = Folder::new("errors");
    expect_error(&dir.0, "xpu-clip-tok", "vocab.json is missing");
    dir.copy(&small, &["vocab.json"]);
    expect_error(&dir.0, "xpu-clip-tok", "merges.txt is missing");
    dir.copy(&small, &["merges.txt"]);
    ClipTokenizer::from_folder(&dir.0).unwrap();

    // vocab.json: not JSON, not an object, a non-integer id.
    dir.put("vocab.json", b"{\"a\": 1,");
    expect_error(&dir.0, "vocab.json", "not valid JSON");
    dir.put("vocab.json", b"[1, 2]");
    expect_error(&dir.0, "vocab.json", "expected an object");
    dir.put("vocab.json", b"{\"a\": -1}");
    expect_error(&dir.0, "vocab.json", "\"a\"");
    dir.put("vocab.json", b"{}");
    expect_error(&dir.0, "vocab.json", "empty");
    // Without the special tokens.
    dir.put("vocab.json", b"{\"a\": 0, \"b\": 1}");
    expect_error(&dir.0, "vocab.json", "<|startoftext|>");
    dir.copy(&small, &["vocab.json"]);

    // merges.txt: a line of three symbols, bytes that are not UTF-8.
    dir.put("merges.txt", b"#version: 0.2\ni n\nt h e\n");
    expect_error(&dir.0, "merges.txt", "line 3");
    dir.put("merges.txt", b"#version: 0.2\n\xff\xfe n\n");
    expect_error(&dir.0, "merges.txt", "UTF-8");
    dir.copy(&small, &["merges.txt"]);

    // tokenizer_config.json: bad JSON, a bad length, a token that is neither string nor object,
    // a pad token the vocabulary lacks.
    dir.put("tokenizer_config.json", b"{");
    expect_error(&dir.0, "tokenizer_config.json", "not valid JSON");
    dir.put(
        "tokenizer_config.json",
        b"{\"model_max_length\": 1000000000000000019884624838656}",
    );
    expect_error(&dir.0, "tokenizer_config.json", "model_max_length");
    dir.put("tokenizer_config.json", b"{\"model_max_length\": 1}");
    expect_error(&dir.0, "tokenizer_config.json", "model_max_length");
    dir.put("tokenizer_config.json", b"{\"pad_token\": 5}");
    expect_error(&dir.0, "tokenizer_config.json", "pad_token");
    dir.put("tokenizer_config.json", b"{\"pad_token\": \"<pad>\"}");
    expect_error(&dir.0, "vocab.json", "\"<pad>\"");
    dir.put(
        "tokenizer_config.json",
        b"{\"added_tokens_decoder\": {\"x\": {\"content\": \"a\"}}}",
    );
    expect_error(&dir.0, "tokenizer_config.json", "added_tokens_decoder.x");
    std::fs::remove_file(dir.0.join("tokenizer_config.json")).unwrap();
    dir.put(
        "special_tokens_map.json",
        b"{\"bos_token\": {\"lstrip\": false}}",
    );
    expect_error(&dir.0, "special_tokens_map.json", "bos_token");
    std::fs::remove_file(dir.0.join("special_tokens_map.json")).unwrap();
    dir.put("added_tokens.json", b"{\"<x>\": \"seven\"}");
    expect_error(&dir.0, "added_tokens.json", "<x>");
    std::fs::remove_file(dir.0.join("added_tokens.json")).unwrap();

    // tokenizer.json alone: not JSON, not BPE, another word suffix, a bad merge.
    for n in VOCAB_FILES {
        std::fs::remove_file(dir.0.join(n)).unwrap();
    }
    dir.put("tokenizer.json", b"{\"model\": ");
    expect_error(&dir.0, "tokenizer.json", "not valid JSON");
    dir.put("tokenizer.json", b"{\"model\": {\"type\": \"WordPiece\"}}");
    expect_error(&dir.0, "tokenizer.json", "BPE");
    dir.put(
        "tokenizer.json",
        b"{\"model\": {\"type\": \"BPE\", \"end_of_word_suffix\": \"\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
    );
    expect_error(&dir.0, "tokenizer.json", "end_of_word_suffix");
    dir.put(
        "tokenizer.json",
        b"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [[\"a\"]]}}",
    );
    expect_error(&dir.0, "tokenizer.json", "model.merges[0]");
    // A missing file given by path.
    let err = ClipTokenizer::from_files(dir.0.join("vocab.json"), dir.0.join("merges.txt"))
        .expect_err("no vocab.json");
    assert!(matches!(err, Error::Io { .. }) && message(&err).contains("vocab.json"));
}

/// Random text of one of several kinds: raw bytes read lossily, code points from anywhere,
/// and mixes of ASCII, whitespace, specials, combining marks, CJK and emoji.
fn random_text(rng: &mut common::rng::Rng) -> String {
    let len = rng.below(120);
    match rng.below(3) {
        0 => {
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            String::from_utf8_lossy(&bytes).into_owned()
        }
        1 => (0..len)
            .filter_map(|_| char::from_u32(rng.below(0x11_0000) as u32))
            .collect(),
        _ => {
            const PARTS: [&str; 20] = [
                "a",
                "Cat",
                " ",
                "\t",
                "\n",
                "'s",
                "'",
                "!",
                "<|endoftext|>",
                "<|startoftext|>",
                "<|",
                "3",
                ".",
                "\u{301}",
                "\u{345}",
                "猫",
                "🐱",
                "\u{200d}",
                "ſ",
                "Σ",
            ];
            (0..len).map(|_| PARTS[rng.below(PARTS.len())]).collect()
        }
    }
}

fn check_frame(tok: &ClipTokenizer, enc: &Encoding, text: &str) {
    let max = tok.model_max_length();
    assert_eq!(enc.ids.len(), max, "{text:?}");
    assert_eq!(enc.ids[0], tok.bos_id(), "{text:?}");
    assert!((2..=max).contains(&enc.length), "{text:?}");
    assert_eq!(enc.ids[enc.length - 1], tok.eos_id(), "{text:?}");
    assert!(
        enc.ids[enc.length..].iter().all(|&id| id == tok.pad_id()),
        "{text:?}"
    );
    let unpadded = tok.encode_unpadded(text).unwrap();
    assert_eq!(
        unpadded.len(),
        enc.length + enc.truncated_ids.len(),
        "{text:?}"
    );
    assert_eq!(
        enc.ids[..enc.length - 1],
        unpadded[..enc.length - 1],
        "{text:?}"
    );
    assert_eq!(enc.is_truncated(), unpadded.len() > max, "{text:?}");
    tok.decode(&unpadded).unwrap();
}

#[test]
fn random_text_never_fails() {
    let tokenizers = [load("sd1"), load("sd2"), load("small")];
    let mut rng = common::rng::Rng(0x5eed_c11b);
    for i in 0..3000 {
        let text = random_text(&mut rng);
        let tok = &tokenizers[i % tokenizers.len()];
        let enc = tok
            .encode(&text)
            .unwrap_or_else(|e| panic!("case {i} {text:?}: {e}"));
        check_frame(tok, &enc, &text);
    }
}
