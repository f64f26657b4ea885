//! Enveloped XML signatures as NVIDIA signs its RIMs: Canonical XML 1.1 of the document
//! without its `Signature` (SHA-384, compared with `DigestValue`), the canonical
//! `SignedInfo` signed with ECDSA P-384 (raw r ‖ s), and the signer's certificates in
//! `KeyInfo`.
//!
//! The XML is parsed by `roxmltree` ([`parse`], [`parse_bytes`]): well-formedness,
//! namespaces, character and entity references, line-end and attribute-value
//! normalisation are its; duplicate attributes (also under two prefixes bound to one
//! namespace), DTDs (and so entity definitions and default attributes) are refused as
//! malformed, as is nesting deeper than 64 elements. On that tree this module implements
//! Canonical XML 1.1 without comments ([`canonicalize_document`], [`canonicalize_subtree`]):
//! comments dropped, CDATA as escaped text, processing instructions kept (those outside the
//! root element on their own line), empty elements with an end tag, namespace
//! declarations in scope rendered where they change (`xmlns=""` only where a default
//! namespace is undone), attributes sorted by namespace URI then local name, and for a
//! document subset's apex the `xml:lang` and `xml:space` attributes inherited from its
//! ancestors (`xml:id` is not inherited; an ancestor's `xml:base`, whose C14N 1.1 fix-up
//! is not implemented, is refused).

use std::collections::BTreeMap;

use super::malformed;
use crate::Result;

/// The XML namespace (`xml:` attributes).
const XML_NS: &str = "http://www.w3.org/XML/1998/namespace";
/// The XML-DSig namespace.
pub const DSIG_NS: &str = "http://www.w3.org/2000/09/xmldsig#";
/// Deepest element nesting read (RIMs nest five deep).
const MAX_DEPTH: usize = 64;
/// Most nodes read (a RIM has a few hundred).
const MAX_NODES: u32 = 200_000;

/// An attribute (namespace declarations are not attributes here: see
/// [`Element::namespaces`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attribute {
    /// The qualified name as written (`ns2:Hash0`).
    pub name: String,
    /// The namespace URI, for a prefixed name.
    pub namespace: Option<String>,
    /// The local name.
    pub local: String,
    /// The normalised value.
    pub value: String,
}

/// An element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    /// The qualified name as written (`ds:Signature`).
    pub name: String,
    /// The namespace URI.
    pub namespace: Option<String>,
    /// Attributes in document order.
    pub attrs: Vec<Attribute>,
    /// The namespaces in scope (declared here or inherited): prefix (`""` for the default
    /// namespace) to URI; `xml` left out.
    pub namespaces: BTreeMap<String, String>,
    /// Children in order (comments are not kept).
    pub children: Vec<Node>,
}

/// A child of an element, or a node beside the root element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// An element.
    Element(Element),
    /// Character data (CDATA included), unescaped.
    Text(String),
    /// A processing instruction.
    Pi {
        /// Its target.
        target: String,
        /// Its data ("" when none).
        data: String,
    },
}

/// A parsed document: the root element, and the processing instructions before and after
/// it (comments and white space there are not part of the canonical form).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// Processing instructions before the root element.
    pub before: Vec<Node>,
    /// The root element.
    pub root: Element,
    /// Processing instructions after the root element.
    pub after: Vec<Node>,
}

/// XML 1.0 section 2.11 line ends (`\r\n` or a lone `\r` read as `\n`), which roxmltree
/// applies to text and attributes but not to processing instructions.
fn line_ends(s: &str) -> String {
    s.replace("\r\n", "\n").replace('\r', "\n")
}

fn pi_node(p: roxmltree::PI<'_>) -> Node {
    Node::Pi {
        target: p.target.to_owned(),
        data: line_ends(p.value.unwrap_or("")),
    }
}

fn qname_at(input: &str, at: usize) -> String {
    // `at` is the element's `<`; its qualified name runs to the first white space, `/` or `>`
    input
        .get(at + 1..)
        .map(|s| {
            s.split(|c: char| c.is_whitespace() || c == '/' || c == '>')
                .next()
                .unwrap_or("")
                .to_owned()
        })
        .unwrap_or_default()
}

fn element(input: &str, n: roxmltree::Node<'_, '_>, depth: usize) -> Result<Element> {
    if depth > MAX_DEPTH {
        return Err(malformed(format!("XML: nested deeper than {MAX_DEPTH}")));
    }
    let attrs = n
        .attributes()
        .map(|a| Attribute {
            name: input.get(a.range_qname()).unwrap_or(a.name()).to_owned(),
            namespace: a.namespace().map(str::to_owned),
            local: a.name().to_owned(),
            value: a.value().to_owned(),
        })
        .collect();
    let namespaces = n
        .namespaces()
        .filter(|ns| ns.name() != Some("xml"))
        .map(|ns| (ns.name().unwrap_or("").to_owned(), ns.uri().to_owned()))
        .collect();
    let mut children = Vec::new();
    for c in n.children() {
        match c.node_type() {
            roxmltree::NodeType::Element => {
                children.push(Node::Element(element(input, c, depth + 1)?));
            }
            roxmltree::NodeType::Text => {
                children.push(Node::Text(c.text().unwrap_or("").to_owned()));
            }
            roxmltree::NodeType::PI => children.extend(c.pi().map(pi_node)),
            roxmltree::NodeType::Comment | roxmltree::NodeType::Root => {}
        }
    }
    Ok(Element {
        name: qname_at(input, n.range().start),
        namespace: n.tag_name().namespace().map(str::to_owned),
        attrs,
        namespaces,
        children,
    })
}

/// Parses a document.
///
/// # Errors
/// [`crate::Error::EvidenceMalformed`] with the parser's reason (not well-formed, a
/// duplicate attribute, a DTD …), or for nesting deeper than 64 elements.
pub fn parse(xml: &str) -> Result<Document> {
    let opts = roxmltree::ParsingOptions {
        allow_dtd: false,
        nodes_limit: MAX_NODES,
        ..roxmltree::ParsingOptions::default()
    };
    let doc = roxmltree::Document::parse_with_options(xml, opts)
        .map_err(|e| malformed(format!("XML: {e}")))?;
    let (mut before, mut after, mut root) = (Vec::new(), Vec::new(), None);
    for c in doc.root().children() {
        match c.node_type() {
            roxmltree::NodeType::Element => root = Some(element(xml, c, 0)?),
            roxmltree::NodeType::PI => {
                if let Some(pi) = c.pi() {
                    if root.is_none() {
                        before.push(pi_node(pi));
                    } else {
                        after.push(pi_node(pi));
                    }
                }
            }
            _ => {}
        }
    }
    let root = root.ok_or_else(|| malformed("XML: no root element"))?;
    Ok(Document {
        before,
        root,
        after,
    })
}

/// [`parse`] of bytes that must be UTF-8 (the entry point for untrusted bytes; never
/// panics).
///
/// # Errors
/// As [`parse`], and for bytes that are not UTF-8.
pub fn parse_bytes(xml: &[u8]) -> Result<Document> {
    parse(std::str::from_utf8(xml).map_err(|e| malformed(format!("XML: not UTF-8: {e}")))?)
}

impl Element {
    /// The name without its prefix.
    pub fn local_name(&self) -> &str {
        self.name.rsplit(':').next().unwrap_or(&self.name)
    }

    /// Whether this is `{namespace}local`.
    pub fn is(&self, namespace: &str, local: &str) -> bool {
        self.namespace.as_deref() == Some(namespace) && self.local_name() == local
    }

    /// An attribute's value by its name as written.
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|a| a.name == name)
            .map(|a| a.value.as_str())
    }

    /// An attribute's value by its local name, whatever its namespace.
    pub fn attr_local(&self, local: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|a| a.local == local)
            .map(|a| a.value.as_str())
    }

    /// The element children.
    pub fn elements(&self) -> impl Iterator<Item = &Element> {
        self.children.iter().filter_map(|c| match c {
            Node::Element(e) => Some(e),
            _ => None,
        })
    }

    /// The first descendant (or self) with this local name.
    pub fn find(&self, local: &str) -> Option<&Element> {
        if self.local_name() == local {
            return Some(self);
        }
        self.elements().find_map(|e| e.find(local))
    }

    /// Every descendant (or self) with this local name, in document order.
    pub fn find_all<'a>(&'a self, local: &str, out: &mut Vec<&'a Element>) {
        if self.local_name() == local {
            out.push(self);
        }
        for e in self.elements() {
            e.find_all(local, out);
        }
    }

    /// The concatenated text of the element's direct text children.
    pub fn text(&self) -> String {
        self.children
            .iter()
            .filter_map(|c| match c {
                Node::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The ancestors of `target` (a descendant of `self`, found by address), outermost
    /// first, `self` included.
    fn ancestors_of<'a>(&'a self, target: &Element) -> Option<Vec<&'a Element>> {
        if std::ptr::eq(self, target) {
            return Some(Vec::new());
        }
        self.elements().find_map(|e| {
            e.ancestors_of(target).map(|mut below| {
                below.insert(0, self);
                below
            })
        })
    }
}

fn esc_text(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\r' => out.push_str("&#xD;"),
            c => out.push(c),
        }
    }
}

fn esc_attr(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '"' => out.push_str("&quot;"),
            '\t' => out.push_str("&#x9;"),
            '\n' => out.push_str("&#xA;"),
            '\r' => out.push_str("&#xD;"),
            c => out.push(c),
        }
    }
}

fn pi(target: &str, data: &str, out: &mut String) {
    out.push_str("<?");
    out.push_str(target);
    if !data.is_empty() {
        out.push(' ');
        out.push_str(data);
    }
    out.push_str("?>");
}

/// One element, `rendered` being the namespace declarations its nearest output ancestor
/// has in force, `inherited` the `xml:` attributes the apex takes from its ancestors.
fn c14n(
    e: &Element,
    rendered: &BTreeMap<String, String>,
    inherited: &[Attribute],
    skip: &dyn Fn(&Element) -> bool,
    out: &mut String,
) {
    let mut now = rendered.clone();
    out.push('<');
    out.push_str(&e.name);
    // namespace declarations, sorted by prefix (the default namespace first)
    for (p, u) in &e.namespaces {
        let undoes_default =
            p.is_empty() && u.is_empty() && rendered.get(p).is_some_and(|r| !r.is_empty());
        if rendered.get(p) == Some(u) || (p.is_empty() && u.is_empty() && !undoes_default) {
            continue;
        }
        out.push_str(if p.is_empty() { " xmlns" } else { " xmlns:" });
        out.push_str(p);
        out.push_str("=\"");
        esc_attr(u, out);
        out.push('"');
        now.insert(p.clone(), u.clone());
    }
    if !e.namespaces.contains_key("") && rendered.get("").is_some_and(|r| !r.is_empty()) {
        out.push_str(" xmlns=\"\"");
        now.insert(String::new(), String::new());
    }
    let mut attrs: Vec<&Attribute> = e.attrs.iter().chain(inherited).collect();
    attrs.sort_by(|a, b| {
        (a.namespace.as_deref().unwrap_or(""), a.local.as_str())
            .cmp(&(b.namespace.as_deref().unwrap_or(""), b.local.as_str()))
    });
    for a in attrs {
        out.push(' ');
        out.push_str(&a.name);
        out.push_str("=\"");
        esc_attr(&a.value, out);
        out.push('"');
    }
    out.push('>');
    for c in &e.children {
        match c {
            Node::Text(t) => esc_text(t, out),
            Node::Pi { target, data } => pi(target, data, out),
            Node::Element(child) if !skip(child) => c14n(child, &now, &[], skip, out),
            Node::Element(_) => {}
        }
    }
    out.push_str("</");
    out.push_str(&e.name);
    out.push('>');
}

/// Canonical XML 1.1 (without comments) of the whole document; subtrees for which `skip`
/// holds are left out (the enveloped-signature transform).
pub fn canonicalize_document(doc: &Document, skip: &dyn Fn(&Element) -> bool) -> String {
    let mut out = String::new();
    for n in &doc.before {
        if let Node::Pi { target, data } = n {
            pi(target, data, &mut out);
            out.push('\n');
        }
    }
    c14n(&doc.root, &BTreeMap::new(), &[], skip, &mut out);
    for n in &doc.after {
        if let Node::Pi { target, data } = n {
            out.push('\n');
            pi(target, data, &mut out);
        }
    }
    out
}

/// Canonical XML 1.1 (without comments) of the document subset that is `apex` (an element
/// of `doc`, found by address) and its descendants: every namespace in scope at the apex
/// is rendered there, and the apex takes the `xml:lang` and `xml:space` of its nearest
/// ancestors that have them, unless it has its own.
///
/// # Errors
/// [`crate::Error::EvidenceMalformed`] when `apex` is not in `doc`, or an ancestor has an
/// `xml:base` (its fix-up is not implemented).
pub fn canonicalize_subtree(doc: &Document, apex: &Element) -> Result<String> {
    let ancestors = doc
        .root
        .ancestors_of(apex)
        .ok_or_else(|| malformed("XML: the element to canonicalize is not in the document"))?;
    let mut inherited: Vec<Attribute> = Vec::new();
    for a in ancestors.iter().rev().flat_map(|e| &e.attrs) {
        if a.namespace.as_deref() != Some(XML_NS) {
            continue;
        }
        match a.local.as_str() {
            "base" => {
                return Err(malformed(
                    "XML: xml:base on an ancestor of the signed element (C14N 1.1 xml:base \
                     fix-up is not implemented)",
                ));
            }
            "lang" | "space"
                if !apex
                    .attrs
                    .iter()
                    .chain(&inherited)
                    .any(|x| x.namespace.as_deref() == Some(XML_NS) && x.local == a.local) =>
            {
                inherited.push(Attribute {
                    name: format!("xml:{}", a.local),
                    ..a.clone()
                });
            }
            // xml:id and other xml: attributes are not inherited
            _ => {}
        }
    }
    let mut out = String::new();
    c14n(apex, &BTreeMap::new(), &inherited, &|_| false, &mut out);
    Ok(out)
}

/// What an enveloped ECDSA P-384 signature holds, and whether its digest matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    /// The canonical `SignedInfo`, the bytes the signature is over.
    pub signed_info: Vec<u8>,
    /// The signature, raw r ‖ s.
    pub signature: Vec<u8>,
    /// The `KeyInfo` certificates (DER), signer first.
    pub certificates: Vec<Vec<u8>>,
}

fn child<'a>(e: &'a Element, local: &str) -> Result<&'a Element> {
    e.elements()
        .find(|c| c.is(DSIG_NS, local))
        .ok_or_else(|| malformed(format!("XML signature: {} has no {local}", e.local_name())))
}

/// Checks the document's enveloped signature structure and digest (one `ds:Signature`, a
/// child of the root; c14n 1.1, SHA-384 of the document without its `Signature`) and
/// returns what the signature check needs.
///
/// # Errors
/// [`crate::Error::EvidenceMalformed`] for another algorithm, a missing part or more than
/// one signature; [`crate::Error::EvidenceInvalid`] when the digest does not match.
pub fn enveloped(doc: &Document) -> Result<Signed> {
    use base64::Engine as _;
    let b64 = |s: &str| {
        let clean: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        base64::engine::general_purpose::STANDARD
            .decode(clean)
            .map_err(|e| malformed(format!("XML signature: base64: {e}")))
    };
    let mut all = Vec::new();
    doc.root.find_all("Signature", &mut all);
    all.retain(|e| e.is(DSIG_NS, "Signature"));
    let sig = match all.as_slice() {
        [one] if doc.root.elements().any(|c| std::ptr::eq(c, *one)) => *one,
        [_] => {
            return Err(malformed(
                "XML signature: the Signature is not a child of the root element",
            ));
        }
        [] => return Err(malformed("XML: no Signature")),
        more => {
            return Err(malformed(format!(
                "XML signature: {} Signature elements",
                more.len()
            )));
        }
    };
    let info = child(sig, "SignedInfo")?;
    let alg =
        |local: &str| -> Result<&str> { Ok(child(info, local)?.attr("Algorithm").unwrap_or("")) };
    const C14N11: &str = "http://www.w3.org/2006/12/xml-c14n11";
    let reference = child(info, "Reference")?;
    if alg("CanonicalizationMethod")? != C14N11
        || alg("SignatureMethod")? != "http://www.w3.org/2001/04/xmldsig-more#ecdsa-sha384"
        || child(reference, "DigestMethod")?.attr("Algorithm")
            != Some("http://www.w3.org/2001/04/xmldsig-more#sha384")
    {
        return Err(malformed(
            "XML signature: not c14n 1.1 with ECDSA P-384 and SHA-384",
        ));
    }
    if info
        .elements()
        .filter(|c| c.is(DSIG_NS, "Reference"))
        .count()
        != 1
        || reference.attr("URI") != Some("")
    {
        return Err(malformed(
            "XML signature: the reference is not the whole document, once",
        ));
    }
    let mut transforms = Vec::new();
    reference.find_all("Transform", &mut transforms);
    let known = [
        "http://www.w3.org/2000/09/xmldsig#enveloped-signature",
        C14N11,
    ];
    if !transforms
        .iter()
        .all(|t| t.attr("Algorithm").is_some_and(|a| known.contains(&a)))
    {
        return Err(malformed(
            "XML signature: a transform other than enveloped-signature and c14n 1.1",
        ));
    }
    let digest = b64(&child(reference, "DigestValue")?.text())?;
    let canonical = canonicalize_document(doc, &|e| std::ptr::eq(e, sig));
    use sha2::Digest as _;
    if sha2::Sha384::digest(canonical.as_bytes()).as_slice() != digest.as_slice() {
        return Err(super::invalid(
            "the RIM's digest does not match its content",
        ));
    }
    let signed_info = canonicalize_subtree(doc, info)?;
    let signature = b64(&child(sig, "SignatureValue")?.text())?;
    let mut certs = Vec::new();
    if let Ok(key_info) = child(sig, "KeyInfo") {
        key_info.find_all("X509Certificate", &mut certs);
    }
    Ok(Signed {
        signed_info: signed_info.into_bytes(),
        signature,
        certificates: certs
            .iter()
            .filter(|c| c.namespace.as_deref() == Some(DSIG_NS))
            .map(|c| b64(&c.text()))
            .collect::<Result<_>>()?,
    })
}
