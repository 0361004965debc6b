//! `#[derive(Message)]` and `#[derive(RemoteMessage)]`.

use crate::attr::{self, Once};
use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::{DeriveInput, LitStr, Path, Token, Type};

/// Which of the two derives was written.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Derive {
    Message,
    RemoteMessage,
}

const KEYS: &[(&str, &str)] = &[
    ("reply", "reply = Type"),
    ("remote", "remote = \"stable.name\""),
    ("crate", "crate = path"),
];

/// The keys of `#[message(..)]`.
struct Keys {
    reply: Option<Type>,
    remote: Option<LitStr>,
    krate: Option<Path>,
}

fn keys(input: &DeriveInput) -> syn::Result<Keys> {
    let example = format!("app.{}", input.ident);
    let mut reply = Once::new();
    let mut remote = Once::new();
    let mut krate = Once::new();
    attr::for_each_key(
        &input.attrs,
        "message",
        "`#[message(reply = Type)]`, or no attribute for a reply of `()`",
        |meta| {
            if meta.path.is_ident("reply") {
                if !meta.input.peek(Token![=]) {
                    return Err(meta.error(
                        "`reply` needs a type: write `reply = u64` (without `reply`, the reply is `()`)",
                    ));
                }
                let ty: Type = meta.value()?.parse()?;
                reply.set(&meta, ty, "reply = Type")
            } else if meta.path.is_ident("remote") {
                let name = attr::stable_name(&meta, &example)?;
                remote.set(&meta, name, "remote = \"stable.name\"")
            } else if meta.path.is_ident("crate") {
                let path = attr::crate_path(&meta, "troubadour_remote")?;
                krate.set(&meta, path, "crate = path")
            } else {
                Err(attr::unknown_key(&meta, "message", KEYS))
            }
        },
    )?;
    Ok(Keys {
        reply: reply.get(),
        remote: remote.get(),
        krate: krate.get(),
    })
}

pub(crate) fn expand(input: &DeriveInput, derive: Derive) -> syn::Result<TokenStream> {
    let Keys {
        reply,
        remote,
        krate,
    } = keys(input)?;
    let ident = &input.ident;
    if derive == Derive::RemoteMessage && remote.is_none() {
        return Err(syn::Error::new(
            Span::call_site(),
            format!(
                "`#[derive(RemoteMessage)]` needs the message's stable name: add \
                 `#[message(remote = \"app.{ident}\")]`, or derive `Message` for a \
                 message that stays in this process"
            ),
        ));
    }
    let reply = reply.unwrap_or_else(|| syn::parse_quote!(()));
    // A remote message's traits are both reached through troubadour_remote,
    // which the user depends on anyway; a local one needs only the core.
    let krate = krate.unwrap_or_else(|| {
        attr::absolute(if remote.is_some() {
            "troubadour_remote"
        } else {
            "troubadour"
        })
    });
    let generic = !input.generics.params.is_empty();

    let mut generics = input.generics.clone();
    if generic {
        let clause = generics.make_where_clause();
        clause
            .predicates
            .push(syn::parse_quote!(Self: ::core::marker::Send + 'static));
        clause
            .predicates
            .push(syn::parse_quote!(#reply: ::core::marker::Send + 'static));
    }
    let mut out = {
        let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
        quote! {
            #[automatically_derived]
            impl #impl_generics #krate::Message for #ident #ty_generics #where_clause {
                type Reply = #reply;
            }
        }
    };

    if let Some(name) = remote {
        // The Message impl's bounds, so that the one above is what proves
        // `Self: Message` (with `Self: Message` here instead, its `Reply`
        // would not normalize to the reply type).
        if generic {
            let clause = generics.make_where_clause();
            clause.predicates.push(syn::parse_quote!(
                Self: #krate::__private::Serialize + #krate::__private::DeserializeOwned
            ));
            clause.predicates.push(syn::parse_quote!(
                #reply: #krate::__private::Serialize + #krate::__private::DeserializeOwned
            ));
        }
        let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
        out.extend(quote! {
            #[automatically_derived]
            impl #impl_generics #krate::RemoteMessage for #ident #ty_generics #where_clause {
                const NAME: &'static str = #name;
            }
        });
    }
    Ok(out)
}
