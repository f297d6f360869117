//! The reasoning effort a model call asks for: a leaf, so `settings` (which reads a default
//! level) needs nothing of `provider`, which re-exports it.

/// Reasoning effort requested from the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Thinking {
    Off,
    Minimal,
    Low,
    #[default]
    Medium,
    High,
    XHigh,
    Max,
}

impl Thinking {
    pub const NAMES: &'static str = "off, minimal, low, medium, high, xhigh, max";

    /// Every level, lowest first.
    pub const ALL: [Thinking; 7] = [
        Thinking::Off,
        Thinking::Minimal,
        Thinking::Low,
        Thinking::Medium,
        Thinking::High,
        Thinking::XHigh,
        Thinking::Max,
    ];

    pub fn parse(s: &str) -> Option<Thinking> {
        Some(match s {
            "off" => Thinking::Off,
            "minimal" => Thinking::Minimal,
            "low" => Thinking::Low,
            "medium" => Thinking::Medium,
            "high" => Thinking::High,
            "xhigh" => Thinking::XHigh,
            "max" => Thinking::Max,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Thinking::Off => "off",
            Thinking::Minimal => "minimal",
            Thinking::Low => "low",
            Thinking::Medium => "medium",
            Thinking::High => "high",
            Thinking::XHigh => "xhigh",
            Thinking::Max => "max",
        }
    }
}
