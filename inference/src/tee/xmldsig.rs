//! Enveloped XML signatures as NVIDIA signs its RIMs: Canonical XML 1.1 of the document
//! without its `Signature` (SHA-384, compared with `DigestValue`), the canonical
//! `SignedInfo` signed with ECDSA P-384 (raw r ‖ s), and the signer's certificates in
//! `KeyInfo`. The XML reader is deliberately small: elements, attributes, namespace
//! declarations and text — no DTDs, comments, CDATA or processing instructions inside the
//! document (a RIM has none; one that does is refused as malformed).

use std::collections::BTreeMap;

use super::malformed;
use crate::Result;

/// An element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    /// The qualified name as written (`ds:Signature`).
    pub name: String,
    /// Attributes as written, namespace declarations included, values unescaped.
    pub attrs: Vec<(String, String)>,
    /// Children in order.
    pub children: Vec<Node>,
}

/// A child of an element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// An element.
    Element(Element),
    /// Character data, unescaped.
    Text(String),
}

fn unescape(s: &str) -> Result<String> {
    if !s.contains('&') {
        return Ok(s.to_owned());
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let end = rest[i..]
            .find(';')
            .ok_or_else(|| malformed("XML: unterminated reference"))?;
        let r = &rest[i + 1..i + end];
        let c = match r {
            "amp" => '&',
            "lt" => '<',
            "gt" => '>',
            "quot" => '"',
            "apos" => '\'',
            _ => r
                .strip_prefix("#x")
                .map(|h| u32::from_str_radix(h, 16))
                .or_else(|| r.strip_prefix('#').map(str::parse))
                .and_then(|n| n.ok())
                .and_then(char::from_u32)
                .ok_or_else(|| malformed(format!("XML: unknown reference &{r};")))?,
        };
        out.push(c);
        rest = &rest[i + end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Parses a document's root element.
///
/// # Errors
/// [`crate::Error::EvidenceMalformed`] for what this reader does not take.
pub fn parse(xml: &str) -> Result<Element> {
    let mut rest = xml.trim_start_matches('\u{feff}').trim_start();
    if rest.starts_with("<?xml") {
        let end = rest
            .find("?>")
            .ok_or_else(|| malformed("XML: bad declaration"))?;
        rest = rest[end + 2..].trim_start();
    }
    let (root, after) = element(rest, 0)?;
    if !after.trim().is_empty() {
        return Err(malformed("XML: content after the root element"));
    }
    Ok(root)
}

/// Deepest element nesting read (RIMs nest five deep).
const MAX_DEPTH: usize = 64;

fn element(input: &str, depth: usize) -> Result<(Element, &str)> {
    if depth > MAX_DEPTH {
        return Err(malformed(format!("XML: nested deeper than {MAX_DEPTH}")));
    }
    let s = input
        .strip_prefix('<')
        .ok_or_else(|| malformed("XML: expected an element"))?;
    if s.starts_with('!') || s.starts_with('?') {
        return Err(malformed(
            "XML: comments, DTDs, CDATA and processing instructions are not read",
        ));
    }
    let name_end = s
        .find(|c: char| c.is_whitespace() || c == '>' || c == '/')
        .ok_or_else(|| malformed("XML: unterminated tag"))?;
    let name = s[..name_end].to_owned();
    let mut rest = &s[name_end..];
    let mut attrs = Vec::new();
    loop {
        rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix("/>") {
            return Ok((
                Element {
                    name,
                    attrs,
                    children: Vec::new(),
                },
                r,
            ));
        }
        if let Some(r) = rest.strip_prefix('>') {
            rest = r;
            break;
        }
        let eq = rest
            .find('=')
            .ok_or_else(|| malformed("XML: attribute without a value"))?;
        let key = rest[..eq].trim().to_owned();
        let v = rest[eq + 1..].trim_start();
        let q = v
            .chars()
            .next()
            .filter(|c| *c == '"' || *c == '\'')
            .ok_or_else(|| malformed("XML: unquoted attribute"))?;
        let end = v[1..]
            .find(q)
            .ok_or_else(|| malformed("XML: unterminated attribute"))?;
        attrs.push((key, unescape(&v[1..1 + end])?));
        rest = &v[end + 2..];
    }
    let mut children = Vec::new();
    loop {
        let lt = rest
            .find('<')
            .ok_or_else(|| malformed(format!("XML: {name} is not closed")))?;
        if lt > 0 {
            children.push(Node::Text(unescape(&rest[..lt])?));
        }
        rest = &rest[lt..];
        if let Some(r) = rest.strip_prefix("</") {
            let end = r
                .find('>')
                .ok_or_else(|| malformed("XML: unterminated end tag"))?;
            if r[..end].trim() != name {
                return Err(malformed(format!("XML: {name} closed by {}", &r[..end])));
            }
            return Ok((
                Element {
                    name,
                    attrs,
                    children,
                },
                &r[end + 1..],
            ));
        }
        let (child, r) = element(rest, depth + 1)?;
        children.push(Node::Element(child));
        rest = r;
    }
}

impl Element {
    /// The name without its prefix.
    pub fn local_name(&self) -> &str {
        self.name.rsplit(':').next().unwrap_or(&self.name)
    }

    /// An attribute's value by its name as written.
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The first descendant (or self) with this local name.
    pub fn find(&self, local: &str) -> Option<&Element> {
        if self.local_name() == local {
            return Some(self);
        }
        self.children.iter().find_map(|c| match c {
            Node::Element(e) => e.find(local),
            Node::Text(_) => None,
        })
    }

    /// Every descendant (or self) with this local name, in document order.
    pub fn find_all<'a>(&'a self, local: &str, out: &mut Vec<&'a Element>) {
        if self.local_name() == local {
            out.push(self);
        }
        for c in &self.children {
            if let Node::Element(e) = c {
                e.find_all(local, out);
            }
        }
    }

    /// The concatenated text of the element's direct text children.
    pub fn text(&self) -> String {
        self.children
            .iter()
            .filter_map(|c| match c {
                Node::Text(t) => Some(t.as_str()),
                Node::Element(_) => None,
            })
            .collect()
    }

    /// The namespace declarations in scope at the element that `path` (indices of element
    /// children from `self`) leads to, excluding that element's own.
    fn inherited(&self, target: &Element) -> Option<BTreeMap<String, String>> {
        if std::ptr::eq(self, target) {
            return Some(BTreeMap::new());
        }
        for c in &self.children {
            if let Node::Element(e) = c
                && let Some(mut below) = e.inherited(target)
            {
                for (p, u) in self.namespaces() {
                    below.entry(p).or_insert(u);
                }
                return Some(below);
            }
        }
        None
    }

    fn namespaces(&self) -> Vec<(String, String)> {
        self.attrs
            .iter()
            .filter_map(|(k, v)| {
                if k == "xmlns" {
                    Some((String::new(), v.clone()))
                } else {
                    k.strip_prefix("xmlns:").map(|p| (p.to_owned(), v.clone()))
                }
            })
            .collect()
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

/// Canonical XML 1.1 of `e` as the apex of a document subset: the namespaces in scope
/// (`inherited` plus its own) not yet rendered, attributes sorted by namespace URI then
/// local name, empty elements written with an end tag; subtrees for which `skip` holds are
/// left out (the enveloped-signature transform).
pub fn canonicalize(
    e: &Element,
    inherited: &BTreeMap<String, String>,
    rendered: &BTreeMap<String, String>,
    skip: &dyn Fn(&Element) -> bool,
    out: &mut String,
) {
    let mut scope = inherited.clone();
    for (p, u) in e.namespaces() {
        scope.insert(p, u);
    }
    let mut now = rendered.clone();
    out.push('<');
    out.push_str(&e.name);
    for (p, u) in &scope {
        if rendered.get(p) == Some(u) || (p.is_empty() && u.is_empty() && !rendered.contains_key(p))
        {
            continue;
        }
        out.push_str(if p.is_empty() { " xmlns" } else { " xmlns:" });
        out.push_str(p);
        out.push_str("=\"");
        esc_attr(u, out);
        out.push('"');
        now.insert(p.clone(), u.clone());
    }
    let mut attrs: Vec<(String, &str, &str, &str)> = e
        .attrs
        .iter()
        .filter(|(k, _)| k != "xmlns" && !k.starts_with("xmlns:"))
        .map(|(k, v)| {
            let (uri, local) = match k.split_once(':') {
                Some((p, l)) => (scope.get(p).cloned().unwrap_or_default(), l),
                None => (String::new(), k.as_str()),
            };
            (uri, local, k.as_str(), v.as_str())
        })
        .collect();
    attrs.sort_by(|a, b| (a.0.as_str(), a.1).cmp(&(b.0.as_str(), b.1)));
    for (_, _, k, v) in attrs {
        out.push(' ');
        out.push_str(k);
        out.push_str("=\"");
        esc_attr(v, out);
        out.push('"');
    }
    out.push('>');
    for c in &e.children {
        match c {
            Node::Text(t) => esc_text(t, out),
            Node::Element(child) if !skip(child) => canonicalize(child, &scope, &now, skip, out),
            Node::Element(_) => {}
        }
    }
    out.push_str("</");
    out.push_str(&e.name);
    out.push('>');
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

/// Checks the document's enveloped signature structure and digest (c14n 1.1, SHA-384 of the
/// document without its `Signature`) and returns what the signature check needs.
///
/// # Errors
/// [`crate::Error::EvidenceMalformed`] for another algorithm or a missing part;
/// [`crate::Error::EvidenceInvalid`] when the digest does not match.
pub fn enveloped(root: &Element) -> Result<Signed> {
    use base64::Engine as _;
    let b64 = |s: &str| {
        let clean: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        base64::engine::general_purpose::STANDARD
            .decode(clean)
            .map_err(|e| malformed(format!("XML signature: base64: {e}")))
    };
    let sig = root
        .find("Signature")
        .ok_or_else(|| malformed("XML: no Signature"))?;
    let info = sig
        .find("SignedInfo")
        .ok_or_else(|| malformed("XML: no SignedInfo"))?;
    let alg = |local: &str| {
        info.find(local)
            .and_then(|e| e.attr("Algorithm"))
            .unwrap_or("")
    };
    const C14N11: &str = "http://www.w3.org/2006/12/xml-c14n11";
    if alg("CanonicalizationMethod") != C14N11
        || alg("SignatureMethod") != "http://www.w3.org/2001/04/xmldsig-more#ecdsa-sha384"
        || alg("DigestMethod") != "http://www.w3.org/2001/04/xmldsig-more#sha384"
    {
        return Err(malformed(
            "XML signature: not c14n 1.1 with ECDSA P-384 and SHA-384",
        ));
    }
    let reference = info
        .find("Reference")
        .ok_or_else(|| malformed("XML: no Reference"))?;
    if reference.attr("URI") != Some("") {
        return Err(malformed(
            "XML signature: the reference is not the whole document",
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
    let digest = b64(&reference
        .find("DigestValue")
        .ok_or_else(|| malformed("XML: no DigestValue"))?
        .text())?;
    let mut doc = String::new();
    let sig_ptr: *const Element = sig;
    canonicalize(
        root,
        &BTreeMap::new(),
        &BTreeMap::new(),
        &|e| std::ptr::eq(e, sig_ptr),
        &mut doc,
    );
    use sha2::Digest as _;
    if sha2::Sha384::digest(doc.as_bytes()).as_slice() != digest.as_slice() {
        return Err(super::invalid(
            "the RIM's digest does not match its content",
        ));
    }
    let inherited = root
        .inherited(info)
        .ok_or_else(|| malformed("XML: SignedInfo not found"))?;
    let mut signed_info = String::new();
    canonicalize(
        info,
        &inherited,
        &BTreeMap::new(),
        &|_| false,
        &mut signed_info,
    );
    let signature = b64(&sig
        .find("SignatureValue")
        .ok_or_else(|| malformed("XML: no SignatureValue"))?
        .text())?;
    let mut certs = Vec::new();
    sig.find_all("X509Certificate", &mut certs);
    Ok(Signed {
        signed_info: signed_info.into_bytes(),
        signature,
        certificates: certs
            .iter()
            .map(|c| b64(&c.text()))
            .collect::<Result<_>>()?,
    })
}
