//! Request pieces the wire APIs build alike, each in its own JSON: the headers of a streamed
//! call, a message's images (or the placeholder a text-only model reads instead), and what a
//! tool result says. One place, so a text-only model reads the same words on every API.

use serde_json::Value;

use super::config::ModelDef;
use crate::base::content::Image;

/// The headers of a JSON request answered by a server-sent event stream, and the key's own
/// header (`(name, value)`) when there is a key.
pub(crate) fn stream_headers(key: Option<(&str, String)>) -> Vec<(String, String)> {
    let mut h = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        ("accept".to_owned(), "text/event-stream".to_owned()),
    ];
    h.extend(key.map(|(name, value)| (name.to_owned(), value)));
    h
}

/// What a text-only model reads in place of `n` images.
pub(crate) fn omitted_text(model: &ModelDef, n: usize) -> String {
    format!(
        "({n} image(s) omitted: the model {} does not accept images)",
        model.id
    )
}

/// How one wire API writes a text part and an image part of a message's content.
#[derive(Clone, Copy)]
pub(crate) struct Parts {
    pub text: fn(&str) -> Value,
    pub image: fn(&Image) -> Value,
}

impl Parts {
    /// One part per image, or for a text-only model one text part saying how many were left
    /// out (so an image is never dropped without a word); nothing for no images.
    pub(crate) fn images(&self, model: &ModelDef, images: &[Image]) -> Vec<Value> {
        if images.is_empty() {
            Vec::new()
        } else if model.supports_images() {
            images.iter().map(self.image).collect()
        } else {
            vec![(self.text)(&omitted_text(model, images.len()))]
        }
    }

    /// The parts of the user message that carries tool results' images after the results
    /// (for APIs whose tool outputs hold text only): a caption, then the images, drained.
    pub(crate) fn result_images(&self, images: &mut Vec<&Image>) -> Vec<Value> {
        let mut parts = vec![(self.text)("Images from the tool results:")];
        parts.extend(images.drain(..).map(|i| (self.image)(i)));
        parts
    }
}

/// A tool result's output text for APIs that want one: its text, a word when it is empty,
/// and for a text-only model the placeholder for its images. Images the model can take are
/// added to `deferred`, to go in a user message after the results (`Parts::result_images`).
pub(crate) fn result_output<'a>(
    model: &ModelDef,
    text: &str,
    is_error: bool,
    images: &'a [Image],
    deferred: &mut Vec<&'a Image>,
) -> String {
    let mut output = match (text.is_empty(), is_error) {
        (true, true) => "(tool error)".to_owned(),
        (true, false) => "(no output)".to_owned(),
        (false, _) => text.to_owned(),
    };
    if !images.is_empty() && !model.supports_images() {
        output.push_str(&format!("\n\n{}", omitted_text(model, images.len())));
    } else {
        deferred.extend(images);
    }
    output
}
