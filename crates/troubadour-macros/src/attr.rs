//! What both derives read the same way: stable names, `crate = path`,
//! keys given twice, unknown keys.

use proc_macro2::Span;
use syn::meta::ParseNestedMeta;
use syn::{Attribute, LitStr, Path, Token};

/// The prefix the runtime keeps for its own names (`wire::is_reserved`
/// in troubadour-remote).
const RESERVED: &str = "troubadour.system.";

/// A key's value and where the key was written, for "given twice".
pub(crate) struct Once<T> {
    value: Option<T>,
}

impl<T> Once<T> {
    pub(crate) fn new() -> Self {
        Once { value: None }
    }

    /// Keeps the value of `key`, or fails on the key if it was given
    /// already. `how` is how to write it once.
    pub(crate) fn set(
        &mut self,
        meta: &ParseNestedMeta<'_>,
        value: T,
        how: &str,
    ) -> syn::Result<()> {
        if self.value.is_some() {
            return Err(meta.error(format!(
                "`{}` is given twice; keep one `{how}`",
                key_name(&meta.path)
            )));
        }
        self.value = Some(value);
        Ok(())
    }

    pub(crate) fn get(self) -> Option<T> {
        self.value
    }
}

/// The key as written, keywords included (`crate`).
pub(crate) fn key_name(path: &Path) -> String {
    path.segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect::<Vec<_>>()
        .join("::")
}

/// Reads every `#[name(..)]` on the item with `each` called per key;
/// `usage` is the attribute written right, for the forms that are not a
/// list (`#[message]`, `#[message = ..]`).
pub(crate) fn for_each_key(
    attrs: &[Attribute],
    name: &str,
    usage: &str,
    mut each: impl FnMut(ParseNestedMeta<'_>) -> syn::Result<()>,
) -> syn::Result<()> {
    for attr in attrs.iter().filter(|a| a.path().is_ident(name)) {
        if !matches!(attr.meta, syn::Meta::List(_)) {
            return Err(syn::Error::new_spanned(
                attr,
                format!("write the keys in parentheses: {usage}"),
            ));
        }
        attr.parse_nested_meta(&mut each)?;
    }
    Ok(())
}

/// Fails on an unknown key, with the closest known one if it looks like
/// a typo, and the list of keys.
pub(crate) fn unknown_key(
    meta: &ParseNestedMeta<'_>,
    attr: &str,
    keys: &[(&str, &str)],
) -> syn::Error {
    let key = key_name(&meta.path);
    let close = keys
        .iter()
        .map(|(k, how)| (distance(&key, k), how))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d);
    let list = match keys {
        [] => String::new(),
        [only] => format!("`{}`", only.1),
        [rest @ .., last] => format!(
            "{} or `{}`",
            rest.iter()
                .map(|(_, how)| format!("`{how}`"))
                .collect::<Vec<_>>()
                .join(", "),
            last.1
        ),
    };
    let hint = match close {
        Some((_, how)) => format!("did you mean `{how}`? "),
        None => String::new(),
    };
    meta.error(format!(
        "unknown key `{key}` in `#[{attr}(..)]`; {hint}the keys are {list}"
    ))
}

/// Edit distance, for "did you mean".
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(here + 1);
            prev = here;
        }
    }
    row[b.len()]
}

/// `key = "stable.name"`: a string, not empty, not reserved. `example` is
/// a name to show in the messages, such as `app.Add`.
pub(crate) fn stable_name(meta: &ParseNestedMeta<'_>, example: &str) -> syn::Result<LitStr> {
    let key = key_name(&meta.path);
    if !meta.input.peek(Token![=]) {
        return Err(meta.error(format!(
            "`{key}` needs the stable name: write `{key} = \"{example}\"`"
        )));
    }
    let value = meta.value()?;
    if !value.peek(LitStr) {
        // Show the name as written, quoted: `remote = counter.Add` becomes
        // `remote = "counter.Add"`.
        let mut written = proc_macro2::TokenStream::new();
        while !value.is_empty() && !value.peek(Token![,]) {
            written.extend([value.parse::<proc_macro2::TokenTree>()?]);
        }
        let text = written.to_string().replace(' ', "");
        if text.is_empty() {
            return Err(meta.error(format!(
                "`{key}` needs the stable name: write `{key} = \"{example}\"`"
            )));
        }
        return Err(syn::Error::new_spanned(
            written,
            format!("the stable name is a string literal: write `{key} = \"{text}\"`"),
        ));
    }
    let lit: LitStr = value.parse()?;
    let name = lit.value();
    if name.is_empty() {
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "the stable name must not be empty: it is what both nodes agree on, \
                 such as `{key} = \"{example}\"`"
            ),
        ));
    }
    if let Some(rest) = name.strip_prefix(RESERVED) {
        let rest = if rest.is_empty() { "Name" } else { rest };
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "names starting with `{RESERVED}` are reserved for the runtime; use a \
                 prefix of your own, such as `{key} = \"app.{rest}\"`"
            ),
        ));
    }
    Ok(lit)
}

/// `crate = path` or `crate = "path"`.
pub(crate) fn crate_path(meta: &ParseNestedMeta<'_>, default: &str) -> syn::Result<Path> {
    if !meta.input.peek(Token![=]) {
        return Err(meta.error(format!(
            "`crate` needs the path the traits are found under: write `crate = {default}`"
        )));
    }
    let value = meta.value()?;
    if value.peek(LitStr) {
        let lit: LitStr = value.parse()?;
        return lit.parse();
    }
    value.parse::<Path>().map_err(|e| {
        syn::Error::new(
            e.span(),
            format!("`crate` takes a path: write `crate = {default}`"),
        )
    })
}

/// `::name` as a path.
pub(crate) fn absolute(name: &str) -> Path {
    let ident = syn::Ident::new(name, Span::call_site());
    syn::parse_quote!(::#ident)
}
