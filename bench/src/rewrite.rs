//! The one way the bench copies a module with additions of its own: the counting copies of
//! [`crate::instrument`] and [`crate::profile`] differ only in what they add, so the reading of
//! the original and the re-encoding around the additions live here, once.
//!
//! A first pass reads the module's [`Outline`]; the second copies every section as it is and
//! appends an [`Additions`]' types, functions, globals, exports and code after the module's own,
//! so every index the module uses keeps its meaning unless the additions redirect it.

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::convert::Infallible;
use wasm_encoder::reencode::{self, Reencode};
use wasm_encoder::{
    CodeSection, ExportKind, ExportSection, Function, FunctionSection, GlobalSection, Instruction,
    TypeSection,
};
use wasmparser::{ExternalKind, KnownCustom, Name, Operator, Parser, Payload, TypeRef};

/// What the first pass reads of a module: enough to lay additions out after what exists.
#[derive(Default)]
pub struct Outline {
    /// The imported functions, `module.name` and type index, in import order.
    pub imports: Vec<(String, u32)>,
    /// Globals, imported and defined.
    pub globals: u32,
    /// The parameter count of each type (0 for types that are not functions).
    pub params: Vec<u32>,
    /// The type of each defined function.
    pub defined: Vec<u32>,
    /// The exported functions, name and function index, in export order.
    pub exports: Vec<(String, u32)>,
    /// The function names of the `name` section, by function index.
    pub names: BTreeMap<u32, String>,
}

impl Outline {
    /// Reads `wasm`'s outline.
    pub fn read(wasm: &[u8]) -> Result<Outline> {
        let mut outline = Outline::default();
        for payload in Parser::new(0).parse_all(wasm) {
            match payload? {
                Payload::ImportSection(section) => {
                    for import in section.into_imports() {
                        let import = import?;
                        match import.ty {
                            TypeRef::Func(ty) => outline
                                .imports
                                .push((format!("{}.{}", import.module, import.name), ty)),
                            TypeRef::Global(_) => outline.globals += 1,
                            _ => {}
                        }
                    }
                }
                Payload::TypeSection(section) => {
                    for group in section {
                        for ty in group?.into_types() {
                            let params = match ty.composite_type.inner {
                                wasmparser::CompositeInnerType::Func(f) => f.params().len(),
                                _ => 0,
                            };
                            outline.params.push(u32::try_from(params)?);
                        }
                    }
                }
                Payload::FunctionSection(section) => {
                    for ty in section {
                        outline.defined.push(ty?);
                    }
                }
                Payload::GlobalSection(section) => outline.globals += section.count(),
                Payload::ExportSection(section) => {
                    for export in section {
                        let export = export?;
                        if export.kind == ExternalKind::Func {
                            outline.exports.push((export.name.to_owned(), export.index));
                        }
                    }
                }
                Payload::CustomSection(section) => {
                    if let KnownCustom::Name(names) = section.as_known() {
                        for name in names {
                            if let Name::Function(map) = name? {
                                for naming in map {
                                    let naming = naming?;
                                    outline.names.insert(naming.index, naming.name.to_owned());
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(outline)
    }

    /// How many functions are imported: the first defined function's index.
    pub fn imported(&self) -> u32 {
        self.imports.len() as u32
    }

    /// How many types are defined: the first added type's index.
    pub fn types(&self) -> u32 {
        self.params.len() as u32
    }

    /// How many functions are defined.
    pub fn functions(&self) -> u32 {
        self.defined.len() as u32
    }

    /// The type of defined function `index` (counted with the imports); `None` for an import.
    pub fn type_of(&self, index: u32) -> Option<u32> {
        let defined = index.checked_sub(self.imported())?;
        self.defined.get(defined as usize).copied()
    }

    /// How many parameters type `ty` takes; an error for a type the module does not define.
    pub fn params_of(&self, ty: u32) -> Result<u32> {
        self.params
            .get(ty as usize)
            .copied()
            .context("an unknown type")
    }
}

/// What a copy adds to the module, each after the module's own.
pub trait Additions {
    /// Appends the added types.
    fn types(&self, types: &mut TypeSection);
    /// Appends the added functions' types.
    fn functions(&self, functions: &mut FunctionSection);
    /// Appends the added globals.
    fn globals(&self, globals: &mut GlobalSection);
    /// Appends the added exports.
    fn exports(&self, exports: &mut ExportSection);
    /// Appends the added functions' bodies, in the order of [`Additions::functions`].
    fn code(&self, code: &mut CodeSection);

    /// The function exported in place of the module's function export `name`, if it is wrapped.
    fn wrapper(&self, name: &str) -> Option<u32>;

    /// Where a call to (or a reference of) function `index` goes in the copy: `index` itself
    /// unless the additions put something in its place.
    fn function_index(&self, index: u32) -> u32 {
        index
    }

    /// Writes a defined function's body into `f`: the function is the `_defined`th one (counted
    /// from the first defined function), `body` its instructions, each as read and as copied.
    /// Copies them unchanged unless the additions change bodies.
    fn body(&self, _defined: u32, body: &[(Operator<'_>, Instruction<'_>)], f: &mut Function) {
        for (_, instruction) in body {
            f.instruction(instruction);
        }
    }
}

/// The copy of `wasm` with `additions` (see the module docs); an error if the module lacks one of
/// the sections the additions go into.
pub fn copy(wasm: &[u8], additions: &impl Additions) -> Result<Vec<u8>> {
    let mut module = wasm_encoder::Module::new();
    let mut copier = Copier {
        additions,
        next: 0,
        sections: 0,
    };
    copier
        .parse_core_module(&mut module, Parser::new(0), wasm)
        .map_err(|e| anyhow::anyhow!("cannot re-encode the module: {e}"))?;
    if copier.sections != 5 {
        bail!("the module lacks a type, function, global, export or code section");
    }
    Ok(module.finish())
}

/// The second pass: copies the module, adding `additions`.
struct Copier<'a, A> {
    additions: &'a A,
    /// The defined function whose body is copied next.
    next: u32,
    /// How many of the five sections the additions go into were seen (types, functions,
    /// globals, exports, code): all five must be, or the additions are incomplete.
    sections: usize,
}

type Error = reencode::Error<Infallible>;

impl<A: Additions> Reencode for Copier<'_, A> {
    type Error = Infallible;

    fn function_index(&mut self, func: u32) -> Result<u32, Error> {
        Ok(self.additions.function_index(func))
    }

    fn parse_export(
        &mut self,
        exports: &mut ExportSection,
        export: wasmparser::Export<'_>,
    ) -> Result<(), Error> {
        let wrapper = match export.kind {
            ExternalKind::Func => self.additions.wrapper(export.name),
            _ => None,
        };
        match wrapper {
            Some(wrapper) => {
                exports.export(export.name, ExportKind::Func, wrapper);
                Ok(())
            }
            None => reencode::utils::parse_export(self, exports, export),
        }
    }

    fn parse_type_section(
        &mut self,
        types: &mut TypeSection,
        section: wasmparser::TypeSectionReader<'_>,
    ) -> Result<(), Error> {
        reencode::utils::parse_type_section(self, types, section)?;
        self.additions.types(types);
        self.sections += 1;
        Ok(())
    }

    fn parse_function_section(
        &mut self,
        functions: &mut FunctionSection,
        section: wasmparser::FunctionSectionReader<'_>,
    ) -> Result<(), Error> {
        reencode::utils::parse_function_section(self, functions, section)?;
        self.additions.functions(functions);
        self.sections += 1;
        Ok(())
    }

    fn parse_global_section(
        &mut self,
        globals: &mut GlobalSection,
        section: wasmparser::GlobalSectionReader<'_>,
    ) -> Result<(), Error> {
        reencode::utils::parse_global_section(self, globals, section)?;
        self.additions.globals(globals);
        self.sections += 1;
        Ok(())
    }

    fn parse_export_section(
        &mut self,
        exports: &mut ExportSection,
        section: wasmparser::ExportSectionReader<'_>,
    ) -> Result<(), Error> {
        reencode::utils::parse_export_section(self, exports, section)?;
        self.additions.exports(exports);
        self.sections += 1;
        Ok(())
    }

    fn parse_function_body(
        &mut self,
        code: &mut CodeSection,
        func: wasmparser::FunctionBody<'_>,
    ) -> Result<(), Error> {
        let defined = self.next;
        self.next += 1;
        let mut f = self.new_function_with_parsed_locals(&func)?;
        let mut reader = func.get_operators_reader()?;
        let mut body = Vec::new();
        while !reader.eof() {
            let op = reader.read()?;
            let instruction = self.instruction(op.clone())?;
            body.push((op, instruction));
        }
        self.additions.body(defined, &body, &mut f);
        code.function(&f);
        Ok(())
    }

    fn parse_code_section(
        &mut self,
        code: &mut CodeSection,
        section: wasmparser::CodeSectionReader<'_>,
    ) -> Result<(), Error> {
        reencode::utils::parse_code_section(self, code, section)?;
        self.additions.code(code);
        self.sections += 1;
        Ok(())
    }
}
