//! The models a session may switch to (ACP `configOptions` `model`): every model of every
//! provider that has credentials, and how to build a provider for one of them.

use std::sync::Arc;

use super::config::{Api, Credentials, Registry, Selection};
use super::remote::RemoteProvider;
use super::Provider;

/// One model on the menu.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MenuModel {
    pub provider: String,
    pub id: String,
    pub name: String,
    pub reasoning: bool,
}

impl MenuModel {
    /// `provider/id`, the option's value (and the provider's label).
    pub(crate) fn value(&self) -> String {
        format!("{}/{}", self.provider, self.id)
    }
}

/// The registry and credentials of the run, kept to build providers for other models.
#[derive(Debug)]
pub(crate) struct ModelMenu {
    registry: Registry,
    credentials: Arc<Credentials>,
    /// `--models` / settings `enabledModels`: only these `(provider, id)` are offered.
    scope: Option<Vec<(String, String)>>,
    /// Settings `providerBackupModel`, resolved: every model built here fails over to it.
    backup: Option<MenuModel>,
}

impl ModelMenu {
    pub(crate) fn new(registry: Registry, credentials: Arc<Credentials>) -> ModelMenu {
        ModelMenu {
            registry,
            credentials,
            scope: None,
            backup: None,
        }
    }

    /// Settings `providerBackupModel` (`provider/id` or a bare id) among the models with
    /// credentials; a reference that names none is a warning and no backup (upstream's rule).
    pub(crate) fn with_backup(mut self, reference: Option<&str>) -> ModelMenu {
        self.backup = reference.and_then(|r| self.find_setting("providerBackupModel", r));
        self
    }

    /// The model a settings `key` names (`provider/id`, else a bare id) among the models with
    /// credentials; one that names none is a warning naming the key.
    fn find_setting(&self, key: &str, reference: &str) -> Option<MenuModel> {
        let models = self.all_models();
        let found = models
            .iter()
            .find(|m| m.value() == reference)
            .or_else(|| models.iter().find(|m| m.id == reference));
        if found.is_none() {
            log::warn!("Ignoring settings key {key}: {reference} is not a model with credentials");
        }
        found.cloned()
    }

    /// A provider for the model a settings `key` names (`subagentDefaultModel`,
    /// `auxiliaryModel`), with the backup model behind it; `None` (warned) when it names none.
    pub(crate) fn setting_model(
        &self,
        key: &str,
        reference: Option<&str>,
    ) -> Option<Arc<dyn Provider>> {
        let model = self.find_setting(key, reference?)?;
        let provider = self.build_plain(&model)?;
        log::info!("{key}: {}", model.value());
        Some(self.with_failover(provider))
    }

    /// `provider` with the backup model behind it (none for the backup itself).
    pub(crate) fn with_failover(&self, provider: Arc<dyn Provider>) -> Arc<dyn Provider> {
        let Some(backup) = self.backup.as_ref() else {
            return provider;
        };
        if provider.label() == backup.value() {
            return provider;
        }
        match self.build_plain(backup) {
            Some(b) => Arc::new(super::failover::Failover {
                primary: provider,
                backup: b,
            }),
            None => provider,
        }
    }

    /// Where keys come from (ACP `authenticate` and `logout` act on it).
    pub(crate) fn credentials(&self) -> &Arc<Credentials> {
        &self.credentials
    }

    /// The provider called `name`.
    pub(crate) fn provider_def(&self, name: &str) -> Option<&super::config::ProviderDef> {
        self.registry.find(name)
    }

    /// The menu limited to `models` (`(provider, id)`, in the order given); an empty list
    /// leaves it whole.
    pub(crate) fn scoped(mut self, models: Vec<(String, String)>) -> ModelMenu {
        self.scope = (!models.is_empty()).then_some(models);
        self
    }

    /// A provider needs no key when it is the user's own (models.json) and names none.
    fn usable(&self, p: &super::config::ProviderDef) -> bool {
        Api::parse(&p.api).is_some()
            && (self.credentials.has_key(p) || (p.custom && p.api_key.is_none()))
    }

    /// Every model this build can call of every provider with credentials, in registry order
    /// (the whole menu, and `prime-agent model list`).
    pub(crate) fn usable_models(
        &self,
    ) -> Vec<(&super::config::ProviderDef, &super::config::ModelDef)> {
        self.registry
            .providers
            .iter()
            .filter(|p| self.usable(p))
            .flat_map(|p| {
                p.models
                    .iter()
                    .filter(move |m| Api::parse(m.api_name(p)).is_some())
                    .map(move |m| (p, m))
            })
            .collect()
    }

    /// Every model of every provider with credentials, in registry order (a scoped menu: the
    /// scope's models with credentials, in its order).
    pub(crate) fn models(&self) -> Vec<MenuModel> {
        let all = self.all_models();
        match &self.scope {
            None => all,
            Some(scope) => scope
                .iter()
                .filter_map(|(p, id)| {
                    all.iter()
                        .find(|m| m.provider == *p && m.id == *id)
                        .cloned()
                })
                .collect(),
        }
    }

    fn all_models(&self) -> Vec<MenuModel> {
        self.usable_models()
            .into_iter()
            .map(|(p, m)| MenuModel {
                provider: p.name.clone(),
                id: m.id.clone(),
                name: m.name.clone(),
                reasoning: m.reasoning,
            })
            .collect()
    }

    /// A provider for `model` (one of `models()`), with the backup model behind it.
    pub(crate) fn build(&self, model: &MenuModel) -> Option<Arc<dyn Provider>> {
        let provider = self.build_plain(model)?;
        log::info!("Model switched to {}", model.value());
        Some(self.with_failover(provider))
    }

    fn build_plain(&self, model: &MenuModel) -> Option<Arc<dyn Provider>> {
        let p = self.registry.find(&model.provider)?;
        let m = p.models.iter().find(|m| m.id == model.id)?;
        let api = Api::parse(m.api_name(p))?;
        let key_optional = p.custom && p.api_key.is_none();
        let selection = Selection {
            provider: p.clone(),
            model: m.clone(),
            api,
            assumed_defaults: false,
        };
        Some(Arc::new(RemoteProvider::new(
            selection,
            self.credentials.clone(),
            key_optional,
        )))
    }
}
