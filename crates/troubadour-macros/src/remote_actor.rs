//! `#[derive(RemoteActor)]`.

use crate::attr::{self, Once};
use proc_macro2::{Span, TokenStream};
use quote::{quote, ToTokens};
use syn::punctuated::Punctuated;
use syn::{DeriveInput, LitStr, Path, Token, Type};

const KEYS: &[(&str, &str)] = &[
    ("name", "name = \"stable.Name\""),
    ("handle", "handle(A, B)"),
    ("handle_async", "handle_async(C)"),
    ("crate", "crate = path"),
];

/// How the actor handles a message it accepts.
#[derive(Clone, Copy)]
enum Kind {
    /// A `Handler`: `accepts.handle::<M>()`.
    Sync,
    /// An `AsyncHandler`: `accepts.handle_async::<M>()`.
    Async,
}

struct Keys {
    name: Option<LitStr>,
    accepted: Vec<(Type, Kind)>,
    krate: Option<Path>,
}

fn keys(input: &DeriveInput) -> syn::Result<Keys> {
    let example = format!("app.{}", input.ident);
    let mut name = Once::new();
    let mut krate = Once::new();
    let mut accepted: Vec<(Type, Kind)> = Vec::new();
    attr::for_each_key(
        &input.attrs,
        "remote",
        &format!("`#[remote(name = \"{example}\", handle(A, B))]`"),
        |meta| {
            let kind = if meta.path.is_ident("name") {
                let lit = attr::stable_name(&meta, &example)?;
                return name.set(&meta, lit, "name = \"stable.Name\"");
            } else if meta.path.is_ident("crate") {
                let path = attr::crate_path(&meta, "troubadour_remote")?;
                return krate.set(&meta, path, "crate = path");
            } else if meta.path.is_ident("handle") {
                Kind::Sync
            } else if meta.path.is_ident("handle_async") {
                Kind::Async
            } else {
                return Err(attr::unknown_key(&meta, "remote", KEYS));
            };
            let key = attr::key_name(&meta.path);
            if !meta.input.peek(syn::token::Paren) {
                return Err(meta.error(format!(
                    "list the messages in parentheses: write `{key}(A, B)`"
                )));
            }
            let content;
            syn::parenthesized!(content in meta.input);
            let types = Punctuated::<Type, Token![,]>::parse_terminated(&content)?;
            for ty in types {
                let text = ty.to_token_stream().to_string();
                if accepted
                    .iter()
                    .any(|(seen, _)| seen.to_token_stream().to_string() == text)
                {
                    return Err(syn::Error::new_spanned(
                        &ty,
                        format!(
                            "`{}` is listed twice; list each message once, in `handle` \
                             for a `Handler` or in `handle_async` for an `AsyncHandler`",
                            text.replace(' ', "")
                        ),
                    ));
                }
                accepted.push((ty, kind));
            }
            Ok(())
        },
    )?;
    Ok(Keys {
        name: name.get(),
        accepted,
        krate: krate.get(),
    })
}

pub(crate) fn expand(input: &DeriveInput) -> syn::Result<TokenStream> {
    let Keys {
        name,
        accepted,
        krate,
    } = keys(input)?;
    let ident = &input.ident;
    let Some(name) = name else {
        return Err(syn::Error::new(
            Span::call_site(),
            format!(
                "`#[derive(RemoteActor)]` needs the actor type's stable name: add \
                 `#[remote(name = \"app.{ident}\", handle(..))]`"
            ),
        ));
    };
    let krate = krate.unwrap_or_else(|| attr::absolute("troubadour_remote"));

    let mut generics = input.generics.clone();
    if !generics.params.is_empty() {
        let clause = generics.make_where_clause();
        clause
            .predicates
            .push(syn::parse_quote!(Self: #krate::__private::Actor));
        for (ty, kind) in &accepted {
            let marker = match kind {
                Kind::Sync => quote!(Immediate),
                Kind::Async => quote!(Awaiting),
            };
            clause
                .predicates
                .push(syn::parse_quote!(#ty: #krate::RemoteMessage));
            clause.predicates.push(syn::parse_quote!(
                Self: #krate::__private::Handles<#ty, #krate::__private::#marker>
            ));
        }
    }
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    let calls = accepted.iter().map(|(ty, kind)| match kind {
        Kind::Sync => quote!(.handle::<#ty>()),
        Kind::Async => quote!(.handle_async::<#ty>()),
    });
    let body = if accepted.is_empty() {
        quote!(let _ = accepts;)
    } else {
        quote!(accepts #(#calls)*;)
    };
    Ok(quote! {
        #[automatically_derived]
        impl #impl_generics #krate::RemoteActor for #ident #ty_generics #where_clause {
            const NAME: &'static str = #name;
            fn accepts(accepts: &mut #krate::Accepts<Self>) {
                #body
            }
        }
    })
}
