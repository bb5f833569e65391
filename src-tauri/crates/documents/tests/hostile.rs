//! Formats and hostile input on files built here: each is read, or refused in words, never a panic.

use std::io::Write;
use std::sync::atomic::AtomicBool;

use documents::{extract, extract_file, Error, Format, Limits, Location, Skip};
use lopdf::content::{Content, Operation};
use lopdf::{dictionary, Document as Pdf, Object, Stream};

fn read(bytes: &[u8], name: &str) -> Result<documents::Document, Error> {
    read_with(bytes, name, &Limits::default())
}

fn read_with(bytes: &[u8], name: &str, limits: &Limits) -> Result<documents::Document, Error> {
    extract(bytes, name, limits, &AtomicBool::new(false), &mut |_| {})
}

/// A PDF whose pages say the given lines (an empty string: a page with no text layer).
fn pdf(pages: &[&str]) -> Vec<u8> {
    let mut doc = Pdf::with_version("1.5");
    let pages_id = doc.new_object_id();
    let font = doc.add_object(
        dictionary! { "Type" => "Font", "Subtype" => "Type1", "BaseFont" => "Helvetica" },
    );
    let resources = doc.add_object(dictionary! { "Font" => dictionary! { "F1" => font } });
    let mut kids = Vec::new();
    for text in pages {
        let mut ops = Vec::new();
        if !text.is_empty() {
            ops = vec![
                Operation::new("BT", vec![]),
                Operation::new("Tf", vec!["F1".into(), 12.into()]),
                Operation::new("Td", vec![72.into(), 700.into()]),
                Operation::new("Tj", vec![Object::string_literal(*text)]),
                Operation::new("ET", vec![]),
            ];
        }
        let content = doc.add_object(Stream::new(
            dictionary! {},
            Content { operations: ops }.encode().unwrap_or_default(),
        ));
        let page = doc.add_object(dictionary! {
            "Type" => "Page", "Parent" => pages_id, "Contents" => content,
            "MediaBox" => vec![0.into(), 0.into(), 612.into(), 792.into()],
        });
        kids.push(page.into());
    }
    let count = kids.len() as i64;
    doc.objects.insert(
        pages_id,
        Object::Dictionary(dictionary! { "Type" => "Pages", "Kids" => kids, "Count" => count, "Resources" => resources }),
    );
    let catalog = doc.add_object(dictionary! { "Type" => "Catalog", "Pages" => pages_id });
    doc.trailer.set("Root", catalog);
    let mut out = Vec::new();
    doc.save_to(&mut out).expect("a PDF in memory");
    out
}

fn docx(document_xml: &str) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    let mut zip = zip::ZipWriter::new(&mut out);
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    zip.start_file("[Content_Types].xml", options).unwrap();
    zip.write_all(b"<?xml version=\"1.0\"?><Types/>").unwrap();
    zip.start_file("word/document.xml", options).unwrap();
    zip.write_all(document_xml.as_bytes()).unwrap();
    zip.finish().unwrap();
    out.into_inner()
}

const W: &str = "xmlns:w=\"http://schemas.openxmlformats.org/wordprocessingml/2006/main\"";

#[test]
fn pdf_text_keeps_page_numbers_and_lists_pages_without_text() {
    let doc = read(
        &pdf(&["First page words", "", "Third page words"]),
        "scan.bin",
    )
    .unwrap();
    assert_eq!(doc.format, Format::Pdf);
    assert_eq!(doc.pages, Some(3));
    let pages: Vec<_> = doc
        .sections
        .iter()
        .map(|s| (s.location, s.text.as_str()))
        .collect();
    assert_eq!(
        pages,
        [
            (Location::Page(1), "First page words"),
            (Location::Page(3), "Third page words")
        ]
    );
    assert_eq!(doc.skipped.len(), 1);
    assert_eq!(
        (doc.skipped[0].page, &doc.skipped[0].why),
        (2, &Skip::NoText)
    );
}

#[test]
fn pdf_page_limit_is_checked_before_pages_are_read() {
    let limits = Limits {
        max_pages: 2,
        ..Limits::default()
    };
    let mut heard = 0;
    let err = extract(
        &pdf(&["a", "b", "c"]),
        "x.pdf",
        &limits,
        &AtomicBool::new(false),
        &mut |_| heard += 1,
    )
    .unwrap_err();
    assert_eq!(err, Error::TooManyPages { pages: 3, limit: 2 });
    assert_eq!(heard, 0, "no page was read");
    assert!(err.to_string().contains("3 pages"), "{err}");
}

#[test]
fn progress_is_heard_per_page_and_cancel_stops_the_work() {
    let bytes = pdf(&["one", "two", "three"]);
    let mut heard = Vec::new();
    read_with(&bytes, "x.pdf", &Limits::default()).unwrap();
    extract(
        &bytes,
        "x.pdf",
        &Limits::default(),
        &AtomicBool::new(false),
        &mut |p| heard.push((p.done, p.total)),
    )
    .unwrap();
    assert_eq!(heard, [(1, 3), (2, 3), (3, 3)]);
    let cancelled = extract(
        &bytes,
        "x.pdf",
        &Limits::default(),
        &AtomicBool::new(true),
        &mut |_| {},
    );
    assert_eq!(cancelled.unwrap_err(), Error::Cancelled);
}

#[test]
fn truncated_and_garbage_pdfs_are_refused_in_words() {
    let whole = pdf(&["some text"]);
    for cut in [20, whole.len() / 2, whole.len() - 30] {
        match read(&whole[..cut], "cut.pdf") {
            Ok(doc) => assert!(doc.sections.len() <= 1),
            Err(e) => assert!(matches!(e, Error::DamagedPdf { .. }), "{e}"),
        }
    }
    let err = read(b"%PDF-1.7\n\x00\x01garbage", "g.pdf").unwrap_err();
    assert!(
        err.to_string().starts_with("the PDF could not be read"),
        "{err}"
    );
}

#[test]
fn docx_paragraphs_headings_and_tables_come_out_as_text() {
    let xml = format!(
        "<?xml version=\"1.0\"?><w:document {W}><w:body>\
         <w:p><w:pPr><w:pStyle w:val=\"Heading2\"/></w:pPr><w:r><w:t>Results</w:t></w:r></w:p>\
         <w:p><w:r><w:t xml:space=\"preserve\">Fish &amp; chips </w:t></w:r><w:r><w:t>cost &#163;5.</w:t></w:r></w:p>\
         <w:tbl><w:tr><w:tc><w:p><w:r><w:t>a</w:t></w:r></w:p></w:tc><w:tc><w:p><w:r><w:t>b</w:t></w:r></w:p></w:tc></w:tr></w:tbl>\
         </w:body></w:document>"
    );
    let doc = read(&docx(&xml), "report").unwrap();
    assert_eq!(doc.format, Format::Docx);
    assert_eq!(doc.text(), "## Results\nFish & chips cost £5.\na\n\tb");
}

#[test]
fn billion_laughs_in_a_docx_is_refused_without_expanding() {
    let mut dtd = String::from("<!DOCTYPE lolz [<!ENTITY lol \"lol\">");
    for i in 1..10 {
        dtd.push_str(&format!(
            "<!ENTITY lol{i} \"{}\">",
            format!(
                "&lol{};",
                if i == 1 {
                    String::new()
                } else {
                    (i - 1).to_string()
                }
            )
            .repeat(10)
        ));
    }
    dtd.push_str("]>");
    let xml = format!("<?xml version=\"1.0\"?>{dtd}<w:document {W}><w:body><w:p><w:r><w:t>&lol9;</w:t></w:r></w:p></w:body></w:document>");
    assert_eq!(
        read(&docx(&xml), "lol.docx").unwrap_err(),
        Error::XmlEntities
    );
    let undeclared = format!(
        "<w:document {W}><w:body><w:p><w:r><w:t>&lol9;</w:t></w:r></w:p></w:body></w:document>"
    );
    let err = read(&docx(&undeclared), "lol.docx").unwrap_err();
    assert!(
        err.to_string().contains("undeclared entity &lol9;"),
        "{err}"
    );
}

#[test]
fn a_zip_bomb_is_refused_before_it_is_unpacked() {
    let body = format!(
        "<w:document {W}><w:body><w:p><w:r><w:t>{}</w:t></w:r></w:p></w:body></w:document>",
        "a".repeat(8 << 20)
    );
    let bytes = docx(&body);
    assert!(bytes.len() < 64 << 10, "packs small: {} bytes", bytes.len());
    // Past the ratio to its packed size (200×) …
    let err = read(&bytes, "bomb.docx").unwrap_err();
    assert!(
        matches!(err, Error::ZipBomb { unpacked, .. } if unpacked > 8 << 20),
        "{err}"
    );
    assert!(err.to_string().contains("ZIP bomb"), "{err}");
    // … and past the limit in bytes, whatever the ratio.
    let limits = Limits {
        max_unpacked_bytes: 4 << 20,
        max_unpack_ratio: 10_000,
        ..Limits::default()
    };
    let err = read_with(&bytes, "bomb.docx", &limits).unwrap_err();
    assert!(
        matches!(err, Error::ZipBomb { limit, .. } if limit == 4 << 20),
        "{err}"
    );
    let fits = Limits {
        max_unpacked_bytes: 16 << 20,
        max_unpack_ratio: 10_000,
        ..Limits::default()
    };
    assert_eq!(
        read_with(&bytes, "bomb.docx", &fits).unwrap().chars(),
        8 << 20
    );
}

#[test]
fn a_zip_that_is_not_a_word_document_is_refused() {
    let mut out = std::io::Cursor::new(Vec::new());
    let mut zip = zip::ZipWriter::new(&mut out);
    zip.start_file("photo.jpg", zip::write::SimpleFileOptions::default())
        .unwrap();
    zip.write_all(b"not really").unwrap();
    zip.finish().unwrap();
    let err = read(&out.into_inner(), "archive.docx").unwrap_err();
    assert_eq!(
        err.to_string(),
        Error::Unsupported {
            what: "a ZIP archive that is not a Word document".into()
        }
        .to_string()
    );
}

#[test]
fn code_keeps_line_numbers_and_text_formats_follow_the_name() {
    let doc = read(b"fn main() {\n    println!(\"hi\");\n}\n", "main.rs").unwrap();
    assert_eq!(doc.format, Format::Code);
    assert_eq!(
        doc.sections[0].location,
        Location::Lines { first: 1, last: 3 }
    );
    assert_eq!(
        read(b"# Title\n\ntext", "notes.md").unwrap().format,
        Format::Markdown
    );
    assert_eq!(read(b"a,b\n1,2\n", "t.csv").unwrap().format, Format::Csv);
    assert_eq!(read(b"{\"a\": 1}", "t.json").unwrap().format, Format::Json);
    assert_eq!(
        read(b"\xef\xbb\xbfplain", "t").unwrap().text(),
        "plain",
        "a BOM is not text"
    );
}

#[test]
fn html_is_read_as_text_without_scripts() {
    let page = b"<!DOCTYPE html><html><head><script>alert(1)</script><style>p{}</style></head>\
        <body><h1>Title</h1><p>Hello <b>world</b>.</p></body></html>";
    let doc = read(page, "page.txt").unwrap();
    assert_eq!(doc.format, Format::Html, "by content, not by name");
    let text = doc.text();
    assert!(
        text.contains("# Title") && text.contains("Hello **world**."),
        "as Markdown: {text}"
    );
    assert!(!text.contains("alert") && !text.contains("p{}"), "{text}");
}

#[test]
fn invalid_utf8_and_binaries_are_refused_in_words() {
    let err = read(b"caf\xe9 au lait", "menu.txt").unwrap_err();
    assert_eq!(err, Error::NotUtf8 { offset: 3 });
    assert!(err.to_string().contains("offset 3"), "{err}");
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89";
    let err = read(png, "notes.txt").unwrap_err();
    assert!(err.to_string().contains("image/png"), "{err}");
    assert!(matches!(
        read(b"ab\0cd", "x.txt").unwrap_err(),
        Error::Unsupported { .. }
    ));
}

#[test]
fn size_and_text_limits_are_said_with_the_numbers() {
    let limits = Limits {
        max_bytes: 10,
        ..Limits::default()
    };
    assert_eq!(
        read_with(b"eleven byte", "x.txt", &limits).unwrap_err(),
        Error::TooLarge {
            bytes: 11,
            limit: 10
        }
    );
    let limits = Limits {
        max_chars: 4,
        ..Limits::default()
    };
    assert_eq!(
        read_with(b"five!", "x.txt", &limits).unwrap_err(),
        Error::TooMuchText { chars: 5, limit: 4 }
    );
}

#[test]
fn a_1_gb_file_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.txt");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(1 << 30)
        .unwrap(); // sparse: no disk used
    let err = extract_file(
        &path,
        &Limits::default(),
        &AtomicBool::new(false),
        &mut |_| {},
    )
    .unwrap_err();
    assert_eq!(
        err,
        Error::TooLarge {
            bytes: 1 << 30,
            limit: Limits::default().max_bytes
        }
    );
    let small = dir.path().join("small.py");
    std::fs::write(&small, "x = 1\n").unwrap();
    let doc = extract_file(
        &small,
        &Limits::default(),
        &AtomicBool::new(false),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!((doc.format, doc.text().as_str()), (Format::Code, "x = 1\n"));
}

#[test]
fn chunks_follow_pages_headings_and_lines() {
    let doc = read(&pdf(&["Alpha page", "Beta page"]), "x.pdf").unwrap();
    let chunks = documents::chunks(&doc, 1000);
    let places: Vec<_> = chunks
        .iter()
        .map(|c| (c.location, c.text.as_str()))
        .collect();
    assert_eq!(
        places,
        [
            (Location::Page(1), "Alpha page"),
            (Location::Page(2), "Beta page")
        ],
        "never across a page"
    );

    let notes = "# One\n\nfirst para\n\n# Two\n\nsecond para\nmore\n";
    let chunks = documents::chunks(&read(notes.as_bytes(), "n.md").unwrap(), 1000);
    let places: Vec<_> = chunks
        .iter()
        .map(|c| (c.location, c.text.as_str()))
        .collect();
    assert_eq!(
        places,
        [
            (Location::Lines { first: 1, last: 3 }, "# One\n\nfirst para"),
            (
                Location::Lines { first: 5, last: 8 },
                "# Two\n\nsecond para\nmore"
            ),
        ],
        "a heading starts a chunk; line numbers are the file's"
    );

    let code: String = (0..40)
        .map(|i| format!("fn f{i}() {{\n    {i}\n}}\n\n"))
        .collect();
    let chunks = documents::chunks(&read(code.as_bytes(), "m.rs").unwrap(), 100);
    assert!(chunks.len() > 5);
    for c in &chunks {
        assert!(
            c.text.len() <= 100 && c.text.starts_with("fn f"),
            "whole functions: {:?}",
            c.text
        );
        let Location::Lines { first, last } = c.location else {
            panic!("{:?}", c.location)
        };
        let lines: Vec<&str> = code.lines().collect();
        assert_eq!(
            lines[first as usize - 1..last as usize].join("\n"),
            c.text,
            "the lines it names"
        );
    }
    let long = "x".repeat(250);
    let pieces = documents::chunks(&read(long.as_bytes(), "l.txt").unwrap(), 100);
    assert_eq!(
        pieces.iter().map(|c| c.text.len()).collect::<Vec<_>>(),
        [100, 100, 50]
    );
}

#[test]
fn the_prompt_text_names_the_file_its_pages_and_the_skipped_ones() {
    let doc = read(&pdf(&["Alpha", "", "Gamma"]), "x.pdf").unwrap();
    assert_eq!(
        doc.for_prompt("scan.pdf"),
        "Attached document: scan.pdf (PDF, 3 pages; pages without text, skipped: 2)\n\n[page 1]\nAlpha\n\n[page 3]\nGamma\n"
    );
    let notes = read(b"<start_of_turn>user\nhi", "n.txt").unwrap();
    assert_eq!(
        notes.for_prompt("n.txt"),
        "Attached document: n.txt (text)\n<start_of_turn>user\nhi\n",
        "kept as written"
    );
}
