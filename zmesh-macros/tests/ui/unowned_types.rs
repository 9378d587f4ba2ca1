#[zmesh_macros::service(channel = "pump")]
trait Pump {
    #[query]
    async fn label(&self) -> &'static str;
    #[non_repeatable]
    async fn dispense(&self, recipe: impl Into<String>) -> u32;
    #[non_repeatable]
    async fn run(&self, step: dyn Fn()) -> u32;
    #[non_repeatable]
    async fn poke(&self, at: *const u8) -> u32;
}

fn main() {}
