"""Using a trained model: translation with the model or its CTranslate2 export (`translation`,
`ctranslate2_runtime`, `ctranslate2_export`), evaluation with sacreBLEU and chrF (`evaluation`, `metrics`),
attention plots (`attention_plots`), model cards (`model_card`), the Hub upload (`hub`) and parameter counts
(`parameters`). Imports the model, `data` and `common`, never `training`."""
