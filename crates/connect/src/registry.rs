//! The connector families a host registers, keyed by datasource type: the engine asks it
//! for a type's factory ([`ConnectorRegistry`]). Each family (the SQL servers, SQLite
//! where a host allows files, MongoDB) adds its factories; a type no family serves gets
//! the engine's `no connector registered` error.

use std::collections::BTreeMap;
use std::sync::Arc;

use fetcher_engine::DatasourceType;
use fetcher_engine::ports::{ConnectorFactory, ConnectorRegistry};

/// Factories by datasource type.
#[derive(Clone, Default)]
pub struct Families {
    by_type: BTreeMap<DatasourceType, Arc<dyn ConnectorFactory>>,
}

impl Families {
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves `datasource_type` with `factory` (a later one replaces an earlier one).
    pub fn with(
        mut self,
        datasource_type: DatasourceType,
        factory: Arc<dyn ConnectorFactory>,
    ) -> Self {
        self.by_type.insert(datasource_type, factory);
        self
    }

    /// Every type `registry` serves among `types`.
    pub fn with_registry(
        mut self,
        registry: &dyn ConnectorRegistry,
        types: &[DatasourceType],
    ) -> Self {
        for &t in types {
            if let Some(f) = registry.connector(t) {
                self.by_type.insert(t, f);
            }
        }
        self
    }

    /// The types served, in order.
    pub fn types(&self) -> impl Iterator<Item = DatasourceType> + '_ {
        self.by_type.keys().copied()
    }
}

impl ConnectorRegistry for Families {
    fn connector(&self, datasource_type: DatasourceType) -> Option<Arc<dyn ConnectorFactory>> {
        self.by_type.get(&datasource_type).cloned()
    }
}
