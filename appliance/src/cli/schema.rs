//! `meshnode schema`: the protocol digest, the schemas, and validating a file against one.

use fleetmesh_schemas::{Error as SchemaError, SchemaKey, SchemaSet};

use crate::cli::{Outcome, SchemaCommand};

/// Runs `meshnode schema digest|list|validate`.
pub fn run(cmd: SchemaCommand) -> anyhow::Result<Outcome> {
    match cmd {
        SchemaCommand::Digest { dir } => {
            let digest = match dir {
                Some(dir) => SchemaSet::from_dir(&dir)?.digest(),
                None => SchemaSet::embedded().digest(),
            };
            println!("{digest}");
            Ok(Outcome::Ok)
        }
        SchemaCommand::List => {
            let set = SchemaSet::embedded();
            for key in set.keys() {
                let (id, file) = set.source(key).expect("listed keys have sources");
                println!("{key:<28} {file:<34} {id}");
            }
            Ok(Outcome::Ok)
        }
        SchemaCommand::Validate { kind, file } => {
            let key: SchemaKey = kind.parse()?;
            let set = SchemaSet::embedded();
            if !set.contains(&key) {
                anyhow::bail!(
                    "no schema for {key}; `meshnode schema list` shows the {} there are",
                    set.keys().count()
                );
            }
            let doc = crate::manifest::read_document(&file)?;
            match set.validate(&key, &doc) {
                Ok(()) => {
                    println!("valid: {} is a valid {key}", file.display());
                    Ok(Outcome::Ok)
                }
                Err(SchemaError::Invalid(violations)) => {
                    for v in &violations {
                        eprintln!("invalid: {v}");
                    }
                    Ok(Outcome::Negative)
                }
                Err(e) => Err(e.into()),
            }
        }
    }
}
