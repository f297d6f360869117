//! What start-up reads and the system prompt is built from: `settings.json`, thinking levels,
//! skills and templates, the prompt builder (pure: the files it quotes are read before), the
//! client's part of the prompt.

pub(crate) mod client_prompt;
pub(crate) mod prompt;
pub(crate) mod settings;
pub(crate) mod skills;
pub(crate) mod thinking;
